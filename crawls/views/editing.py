"""The crawl page's Edit, Run again and Delete: a draft's whole form, a running or paused
crawl's live settings, a copy as a new draft, and deletion after a confirmation page. They
parse input and call crawls.services (editing.py)."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from crawlhub.redis.connections import REDIS_ERRORS
from crawls import services
from crawls.engine.credentials import INPUTS as AUTH_INPUTS
from crawls.models import Crawl
from crawls.services import visible_crawls
from crawls.views.forms import AuthFields, CrawlForm
from crawls.views.option_fields import crawl_formfield


class LiveSettingsForm(forms.ModelForm):
    """What a running or paused crawl may change; crawls.services checks the values. The
    patterns are textareas of one per line, as on the new-crawl form."""

    class Meta:
        model = Crawl
        fields = list(services.LIVE_FIELDS)
        formfield_callback = crawl_formfield

    def _post_clean(self) -> None:
        """Checked by crawl_change_live, the one place every door goes through."""


def _crawl(request: HttpRequest, pk: int) -> Crawl:
    return get_object_or_404(
        visible_crawls(request.user).select_related("channel", "created_by"), pk=pk
    )


def _add_errors(form: forms.Form, exc: ValidationError) -> None:
    for field, errors in exc.message_dict.items():
        for error in errors:
            form.add_error(field if field in form.fields else None, error)


def crawl_edit(request: HttpRequest, pk: int) -> HttpResponse:
    """A draft: every setting, on the new-crawl form. Running or paused: the live settings."""
    crawl = _crawl(request, pk)
    if services.can_edit(crawl):
        return _edit_draft(request, crawl)
    if not services.can_change_live(crawl):
        messages.error(
            request,
            f"A {crawl.get_state_display().lower()} crawl's settings "
            "cannot be changed; Run again makes a new draft of them.",
        )
        return redirect(crawl)
    form = LiveSettingsForm(request.POST or None, instance=crawl)
    if request.method == "POST" and form.is_valid():
        changes = {f: form.cleaned_data[f] for f in services.LIVE_FIELDS}
        try:
            done = services.crawl_change_live(crawl=crawl, user=request.user, **changes)
        except ValidationError as exc:
            _add_errors(form, exc)
        except services.CrawlActionError as exc:
            messages.error(request, str(exc))
            return redirect(crawl)
        else:
            messages.success(
                request,
                "Settings changed: " + "; ".join(done.lines) + "."
                if done.lines
                else "Nothing changed.",
            )
            return redirect(crawl)
    return render(
        request,
        "crawls/crawl_live_settings.html",
        {
            "nav": "crawls",
            "crawl": crawl,
            "form": form,
            "scope_fields": services.SCOPE_FIELDS,
            "queued": services.crawl_stats_safe(crawl).get("queued", 0),
        },
    )


def crawl_credentials(request: HttpRequest, pk: int) -> HttpResponse:
    """The owner enters the crawl's credentials again, bound to its seeds as they are now."""
    crawl = _crawl(request, pk)
    if not crawl.is_owned_by(request.user):
        raise PermissionDenied(services.owner_only(crawl))
    if crawl.state not in services.CREDENTIAL_STATES:
        messages.error(
            request,
            f"A {crawl.get_state_display().lower()} crawl fetches nothing "
            "more: its credentials cannot change.",
        )
        return redirect(crawl)
    form = AuthFields(request.POST or None, request.FILES or None)
    if request.method == "POST" and form.is_valid():
        auth = {name: form.cleaned_data.get(name) or "" for name in AUTH_INPUTS}
        try:
            origins = services.crawl_enter_credentials(crawl=crawl, user=request.user, auth=auth)
        except ValidationError as exc:
            _add_errors(form, exc)
        except services.CrawlActionError as exc:
            messages.error(request, str(exc))
            return redirect(crawl)
        else:
            messages.success(request, "Credentials saved: sent to " + ", ".join(origins) + ".")
            return redirect(crawl)
    return render(
        request,
        "crawls/crawl_credentials.html",
        {
            "nav": "crawls",
            "crawl": crawl,
            "form": form,
            "saved": services.credentials_shown(crawl),
            "left_out": services.credentials_left_out(crawl),
            "origins": services.origins_of_seeds(crawl.seeds),
        },
    )


def _edit_draft(request: HttpRequest, crawl: Crawl) -> HttpResponse:
    saved = services.credentials_shown(crawl)
    form = CrawlForm(
        request.POST or None,
        request.FILES or None,
        instance=crawl,
        saved=saved,
        initial={"seeds": "\n".join(crawl.seeds), "start_now": False},
    )
    if request.method == "POST" and form.check():
        removals = form.removals()
        auth = form.auth()
        data = dict(form.cleaned_data)
        start_now = data.pop("start_now")
        name, seeds, channel = data.pop("name"), data.pop("seeds"), data.pop("channel")
        try:
            services.crawl_update(
                crawl=crawl,
                user=request.user,
                name=name,
                seeds=seeds,
                channel=channel,
                auth=auth,
                remove_credentials=removals,
                **data,
            )
        except ValidationError as exc:
            crawl.refresh_from_db()
            _add_errors(form, exc)
        else:
            text = "Settings saved."
            if start_now:
                try:
                    services.crawl_start(crawl=crawl, user=request.user)
                    text = "Settings saved; crawl started."
                except (services.CrawlActionError, *REDIS_ERRORS) as exc:
                    messages.error(request, f"Settings saved, but the crawl did not start: {exc}")
                    return redirect(crawl)
            messages.success(request, text)
            return redirect(crawl)
    return render(
        request,
        "crawls/crawl_new.html",
        {
            "nav": "crawls",
            "form": form,
            "heading": f"Edit draft #{crawl.pk}",
            "submit": "Save settings",
            "crawl": crawl,
            "has_credentials": saved,
            "owner_only": "" if crawl.is_owned_by(request.user) else services.owner_only(crawl),
        },
    )


@require_POST
def crawl_run_again(request: HttpRequest, pk: int) -> HttpResponse:
    crawl = _crawl(request, pk)
    try:
        copy = services.crawl_run_again(crawl=crawl, user=request.user)
    except ValidationError as exc:
        messages.error(request, "The copy could not be made: " + " ".join(exc.messages))
        return redirect(crawl)
    messages.success(
        request, f"A new draft with the settings of #{crawl.pk}: check them and start it."
    )
    return redirect(copy)


def crawl_delete_confirm(request: HttpRequest, pk: int) -> HttpResponse:
    """GET: what deleting would remove, and a button; POST: delete."""
    crawl = _crawl(request, pk)
    if request.method == "POST":
        record = services.crawl_delete(crawl=crawl, user=request.user)
        messages.success(
            request,
            f"Crawl #{record.crawl_id} {record.name} deleted, with its {record.pages:,} page(s).",
        )
        return redirect("crawl_list")
    return render(
        request,
        "crawls/crawl_delete.html",
        {
            "nav": "crawls",
            "crawl": crawl,
            "pages": crawl.pages.count(),
            "failures": crawl.failures.count(),
            "schedules": crawl.schedules.count(),
        },
    )
