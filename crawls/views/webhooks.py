"""Pages of webhooks: the list with a form to add one, one webhook and its delivery log."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render

from crawls import webhooks
from crawls.models import Webhook, WebhookDelivery
from crawls.views.forms import WebhookForm, add_service_errors


def webhook_list(request: HttpRequest) -> HttpResponse:
    form = WebhookForm(
        request.POST or None,
        user=request.user,
        initial={"crawl": request.GET.get("crawl"), "channel": request.GET.get("channel")},
    )
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            webhook, secret = webhooks.webhook_create(
                user=request.user,
                url=data["url"],
                events=data["events"],
                crawl=data.get("crawl"),
                channel=data.get("channel"),
            )
        except ValidationError as exc:
            add_service_errors(form, exc)
        else:
            # Shown once, on the page the creation redirects to (reloading makes no second
            # webhook, and shows the secret no more).
            request.session[NEW_SECRET_KEY] = {"id": webhook.pk, "secret": secret}
            return redirect(webhook)
    hooks = webhooks.webhooks_visible_to(request.user)
    return render(
        request,
        "crawls/webhook_list.html",
        {
            "nav": "webhooks",
            "webhooks": hooks,
            "form": form,
        },
        status=400 if form.errors else 200,
    )


NEW_SECRET_KEY = "crawlhub.new_webhook_secret"
# Of an answer's body, the delivery log shows this much, as text.
SNIPPET_SHOWN = 300


def _webhook_page(request: HttpRequest, webhook: Webhook) -> HttpResponse:
    new = request.session.get(NEW_SECRET_KEY)
    secret = ""
    if new and new["id"] == webhook.pk:
        secret = request.session.pop(NEW_SECRET_KEY)["secret"]
    return render(
        request,
        "crawls/webhook_detail.html",
        {
            "snippet_shown": SNIPPET_SHOWN,
            "nav": "webhooks",
            "webhook": webhook,
            "secret": secret,
            "can_change": webhooks.can_change(request.user, webhook),
            "deliveries": webhooks.deliveries_visible_to(request.user, webhook)[:100],
        },
    )


def webhook_detail(request: HttpRequest, pk: int) -> HttpResponse:
    webhook = get_object_or_404(webhooks.webhooks_visible_to(request.user), pk=pk)
    if request.method == "POST":
        webhooks.check_can_change(request.user, webhook)
        action = request.POST.get("action")
        if action in ("enable", "disable"):
            webhooks.webhook_update(webhook=webhook, active=action == "enable")
            messages.success(request, f"Webhook {action}d.")
        elif action == "test":
            delivery = webhooks.webhook_send_test(webhook=webhook)
            if delivery.status == WebhookDelivery.Status.DELIVERED:
                messages.success(
                    request,
                    f"Test delivery #{delivery.pk} delivered: HTTP {delivery.response_status}.",
                )
            else:
                messages.error(request, f"Test delivery #{delivery.pk} failed: {delivery.error}.")
        elif action == "delete":
            webhooks.webhook_delete(webhook=webhook)
            messages.success(request, "Webhook deleted.")
            return redirect("webhook_list")
        return redirect(webhook)
    return _webhook_page(request, webhook)
