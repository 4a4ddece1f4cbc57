"""What a locked-out login gets: the login page again, saying when to try again.

django-axes counts the failed logins (settings: AXES_*, CRAWLHUB_LOGIN_*) and refuses a username
from an address after too many; it calls lockout_response for the answer.
"""

from __future__ import annotations

import math
from datetime import datetime

from axes.helpers import get_client_ip_address, get_cool_off
from axes.models import AccessAttempt
from django.contrib.auth.forms import AuthenticationForm
from django.db.models import Max
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

MAX_USERNAME_SHOWN = 150  # Django's own username limit


def lockout_response(request: HttpRequest, *_) -> HttpResponse:
    """The login page with the form empty and the reason, as 429 Too Many Requests with a
    Retry-After. (django-axes passes the original response and the credentials as well, in an
    order that differs between its sync and async paths: neither is needed.)"""
    username = request.POST.get("username", "")[:MAX_USERNAME_SHOWN]
    until = locked_until(request, username)
    seconds = max(1, math.ceil((until - timezone.now()).total_seconds()))
    minutes = math.ceil(seconds / 60)
    message = (
        f"Too many failed logins for “{username}” from your address. Try again in {minutes} "
        f"minute{'s' if minutes != 1 else ''}, after"
    )
    response = render(
        request,
        "registration/login.html",
        {
            "form": AuthenticationForm(request),
            "locked_out": message,
            "locked_until": until,
            "next": request.POST.get("next", ""),
        },
        status=429,
    )
    response["Retry-After"] = str(seconds)
    return response


def locked_until(request: HttpRequest, username: str) -> datetime:
    """When this username may try again from this address: the cool-off after the last
    failure counted (refused attempts during the lockout are not counted)."""
    last = AccessAttempt.objects.filter(
        username=username, ip_address=get_client_ip_address(request)
    ).aggregate(last=Max("attempt_time"))["last"]
    return (last or timezone.now()) + get_cool_off(request)
