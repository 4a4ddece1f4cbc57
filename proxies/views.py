"""The Proxies page (staff only) and the echo endpoint proxy checks fetch through a proxy."""

from __future__ import annotations

import time

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_not_required
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from crawlhub.web.access import next_path, staff_required
from proxies import pool, services
from proxies.checks import PROXY_HEADERS
from proxies.models import Anonymity, Proxy, ProxyJob, ProxyState

PAGE_SIZE = 100
NOTHING_TICKED = "Tick at least one proxy in the list first, then choose what to do with it."


@login_not_required
@never_cache
@require_GET
def echo(request: HttpRequest) -> JsonResponse:
    """What a proxy check needs and nothing more: the address we were reached from and the
    proxy-revealing headers that arrived. No session needed: validators come through proxies."""
    headers = {name: request.headers[name] for name in PROXY_HEADERS if name in request.headers}
    return JsonResponse({"origin": request.META.get("REMOTE_ADDR", ""), "headers": headers})


class ActionForm(forms.Form):
    action = forms.ChoiceField(
        choices=[
            ("remove", "Remove"),
            ("disable", "Disable"),
            ("enable", "Enable"),
            ("validate", "Validate now"),
        ]
    )
    ids = forms.ModelMultipleChoiceField(
        queryset=Proxy.objects.all(),
        error_messages={"required": NOTHING_TICKED},
    )
    why = forms.CharField(required=False, max_length=1000)

    def clean(self):
        data = super().clean()
        if data.get("action") == "remove" and not (data.get("why") or "").strip():
            self.add_error("why", "Say why the proxies are removed: it goes in the audit log.")
        return data


class ImportForm(forms.Form):
    text = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 6}),
        label="Paste a list",
        help_text="One per line: host:port, scheme://host:port or scheme://user:pass@host:port; "
        "the schemes are http, https, socks5 and socks5h",
    )
    file = forms.FileField(required=False, label="or upload a file")
    url = forms.URLField(
        required=False, label="or fetch a plain-text list from a URL", assume_scheme="https"
    )

    def clean(self):
        data = super().clean()
        given = [k for k in ("text", "file", "url") if data.get(k)]
        if len(given) != 1:
            raise forms.ValidationError("Give exactly one: a pasted list, a file or a URL.")
        return data


@staff_required
def proxy_list(request: HttpRequest) -> HttpResponse:
    query = services.filter_proxies(request.GET)
    page = Paginator(query, PAGE_SIZE).get_page(request.GET.get("page"))
    return render(
        request,
        "proxies/proxy_list.html",
        {
            "nav": "proxies",
            "page": page,
            "params": request.GET,
            "health": pool.health(),
            "states": ProxyState.choices,
            "anonymities": Anonymity.choices[1:],
            "score_ranges": list(services.SCORE_RANGES),
            "channels": pool.channels(),
            "sorts": list(services.SORTS),
            "import_form": ImportForm(),
            "removed_hidden": services.removed_left_out(request.GET),
            "selection": _selection(),
        },
    )


def _selection() -> dict:
    """The rule a top-quality proxy meets, in the words the health panel uses."""
    max_age = settings.PROXY_MAX_AGE
    latency = settings.PROXY_MAX_LATENCY_MS
    return {
        "min_score": settings.PROXY_MIN_SCORE,
        "max_age": f"{max_age // 60} min" if max_age % 60 == 0 else f"{max_age} s",
        "max_latency": f"{latency // 1000} s" if latency % 1000 == 0 else f"{latency} ms",
        "initial_score": pool.INITIAL_SCORE,
    }


@staff_required
@require_POST
def proxy_action(request: HttpRequest) -> HttpResponse:
    form = ActionForm(request.POST)
    back = next_path(request, fallback=reverse("proxy_list"))
    if not form.is_valid():
        for errors in form.errors.values():
            for error in errors:
                messages.error(request, error)
        return redirect(back)
    action = form.cleaned_data["action"]
    result = services.bulk_action(
        action=action,
        proxies=form.cleaned_data["ids"],
        why=form.cleaned_data["why"],
        user=request.user,
    )
    label = dict(form.fields["action"].choices)[action]
    if result.job is not None:
        messages.info(request, f"{label}: {result.selected:,} proxies, in the background.")
        return redirect(result.job)
    messages.success(request, f"{label}: {result.changed} of {result.selected} proxies.")
    return redirect(back)


@staff_required
def proxy_import(request: HttpRequest) -> HttpResponse:
    """The form; a valid list becomes a background job, and the answer is its progress page."""
    posted = request.method == "POST"
    form = ImportForm(request.POST, request.FILES) if posted else ImportForm()
    if posted and form.is_valid():
        try:
            if form.cleaned_data["url"]:
                job = services.start_import_from_url(
                    url=form.cleaned_data["url"], user=request.user
                )
            elif form.cleaned_data["file"]:
                upload = form.cleaned_data["file"]
                if upload.size > services.MAX_LIST_BYTES:
                    raise services.ImportFailed("the file is larger than 5 MB")
                job = services.start_import(
                    text=services.decode_list(upload.read()),
                    source=f"upload: {upload.name}",
                    user=request.user,
                )
            else:
                job = services.start_import(
                    text=form.cleaned_data["text"], source="paste", user=request.user
                )
            return redirect(job)
        except services.ImportFailed as exc:
            form.add_error(None, str(exc))
    return render(
        request,
        "proxies/proxy_import.html",
        {
            "nav": "proxies",
            "form": form,
            "jobs": ProxyJob.objects.select_related("user")[:10],
        },
    )


@staff_required
@require_GET
def proxy_job(request: HttpRequest, pk: int) -> HttpResponse:
    """An import's or a bulk action's progress; the report once it has ended."""
    job = get_object_or_404(ProxyJob.objects.select_related("user"), pk=pk)
    report = None
    if job.kind == ProxyJob.Kind.IMPORT and job.state == ProxyJob.State.DONE:
        report = services.import_report(job, limit=services.SHOWN_LINES)
    return render(
        request,
        "proxies/proxy_job.html",
        {
            "nav": "proxies",
            "job": job,
            "report": report,
            "shown_lines": services.SHOWN_LINES,
        },
    )


@staff_required
@require_GET
@never_cache
def proxy_job_status(request: HttpRequest, pk: int) -> JsonResponse:
    """The progress page's poll: the job's state and counts; with ?report=1, the whole report
    of an import that has ended."""
    job = get_object_or_404(ProxyJob, pk=pk)
    return JsonResponse(services.job_status(job, report=request.GET.get("report") == "1"))


def _channels(proxy: Proxy) -> dict[str, dict]:
    """Where the proxy stands in each channel, with the seconds left on a lease or a ban."""
    now = time.time()
    found = pool.proxy_channels(proxy=proxy.key)
    for place in found.values():
        for until, left in (("leased_until", "leased_for"), ("banned_until", "banned_for")):
            place[left] = None if place[until] is None else max(0, round(place[until] - now))
    return found


@staff_required
def proxy_detail(request: HttpRequest, pk: int) -> HttpResponse:
    proxy = get_object_or_404(Proxy, pk=pk)
    return render(
        request,
        "proxies/proxy_detail.html",
        {
            "nav": "proxies",
            "proxy": proxy,
            "events": proxy.events.select_related("user")[:50],
            "channels": _channels(proxy),
            "live": pool.members().get(proxy.key),
        },
    )
