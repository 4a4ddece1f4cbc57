"""Pages of alert rules: the list with a form (a crawl's or, staff, a channel's), the form on a
crawl's page, and a rule's actions (switch on or off, delete). They parse input and call
crawls/alerts.py, like the API does."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from crawlhub.web.access import next_path
from crawls import alerts
from crawls.models import AlertRule
from crawls.services import visible_crawls
from crawls.views.crawls import crawl_page
from crawls.views.forms import AlertRuleForm, add_service_errors


def _create(request: HttpRequest, form: AlertRuleForm, **target) -> AlertRule | None:
    """The rule the valid form describes, or None with the service's errors on the form."""
    if not form.is_valid():
        return None
    data = form.cleaned_data
    target = target or {"crawl": data.get("crawl"), "channel": data.get("channel")}
    try:
        rule = alerts.rule_create(
            user=request.user,
            kind=data["kind"],
            percent=data["percent"],
            minutes=data["minutes"],
            emails=data["emails"],
            **target,
        )
    except ValidationError as exc:
        add_service_errors(form, exc)
        return None
    messages.success(request, f"Alert rule added: {rule.condition}.")
    return rule


def alert_rule_list(request: HttpRequest) -> HttpResponse:
    form = AlertRuleForm(
        request.POST or None,
        user=request.user,
        initial={"crawl": request.GET.get("crawl"), "channel": request.GET.get("channel")},
    )
    if request.method == "POST" and _create(request, form):
        return redirect("alert_rule_list")
    rules = alerts.rules_visible_to(request.user)
    return render(
        request,
        "crawls/alert_rule_list.html",
        {
            "nav": "alerts",
            "rules": rules,
            "form": form,
            "changeable": {rule.pk for rule in rules if alerts.can_change(request.user, rule)},
        },
        status=400 if form.errors else 200,
    )


@require_POST
def crawl_alert_rule_new(request: HttpRequest, pk: int) -> HttpResponse:
    """The form on a crawl's page; on an error, the page again with the form as it was typed."""
    crawl = get_object_or_404(visible_crawls(request.user), pk=pk)
    form = AlertRuleForm(request.POST, user=request.user, crawl=crawl)
    if _create(request, form, crawl=crawl):
        return redirect(reverse("crawl_detail", args=[crawl.pk]) + "#h-alerts")
    return crawl_page(request, crawl, alert_form=form, status=400)


@require_POST
def alert_rule_action(request: HttpRequest, pk: int) -> HttpResponse:
    rule = get_object_or_404(alerts.rules_visible_to(request.user), pk=pk)
    alerts.check_can_change(request.user, rule)
    action = request.POST.get("action")
    if action in ("enable", "disable"):
        alerts.rule_update(rule=rule, active=action == "enable")
        messages.success(request, f"Alert rule {action}d: {rule.condition}.")
    elif action == "delete":
        alerts.rule_delete(rule=rule)
        messages.success(request, f"Alert rule deleted: {rule.condition}. Its alerts stay.")
    else:
        messages.error(request, f"Unknown action {action!r}: enable, disable or delete.")
    return redirect(next_path(request, reverse("alert_rule_list")))
