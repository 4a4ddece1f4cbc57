"""Who may see what: signed-in users see their crawls (crawls.services.visible_crawls); staff
also see every crawl and administer the proxy pool. Where a form may send them next: only to a
page of this site."""

from functools import wraps

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest
from django.utils.http import url_has_allowed_host_and_scheme


def staff_required(view):
    """Anonymous users go to the login page; signed-in non-staff users get 403."""

    @wraps(view)
    def wrapper(request, *args, **kwargs):
        if not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path())
        if not request.user.is_staff:
            raise PermissionDenied("Only staff can administer the proxy pool.")
        return view(request, *args, **kwargs)

    return wrapper


def next_path(request: HttpRequest, fallback: str) -> str:
    """The request's `next` (POST, else GET) when it is a path on this site, else fallback.

    Django's check refuses other hosts and schemes, `//host` and `/\\host` (which browsers
    read as another host) and URLs starting with a control character. A path is also required
    (an absolute URL to this very host is not needed by any form) and so is printable text
    throughout: a tab, newline or bidi control inside it is refused, not sent on in a header.
    """
    url = (request.POST.get("next") or request.GET.get("next") or "").strip()
    safe = (
        url.startswith("/")
        and url.isprintable()
        and url_has_allowed_host_and_scheme(
            url, allowed_hosts={request.get_host()}, require_https=request.is_secure()
        )
    )
    return url if safe else fallback
