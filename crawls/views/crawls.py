import re
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from crawlhub.http import netguard
from crawlhub.redis.connections import REDIS_ERRORS
from crawlhub.web.access import next_path
from crawls import alerts, changes, listing, services
from crawls.engine import live
from crawls.logs import LogFilter, log_page
from crawls.models import Channel, Crawl, CrawlState
from crawls.services import visible_crawls
from crawls.views.forms import AlertRuleForm, CrawlForm, add_service_errors
from crawls.views.settings_shown import settings_rows

CRAWLS_PER_PAGE = 25
RECENT_ROWS = 15
FAILURES_SHOWN = 50
EVENTS_SHOWN = 15
DEMO_PAGES = 300


def crawl_list(request: HttpRequest) -> HttpResponse:
    staff = request.user.is_staff
    query = listing.ListQuery.from_params(request.GET, staff=staff)
    crawls = listing.crawl_list(request.user, query)
    page = Paginator(crawls, CRAWLS_PER_PAGE).get_page(request.GET.get("page"))
    stats = services.crawls_stats_safe(list(page))
    durations = listing.durations(page)
    rows = [
        (
            crawl,
            stats[crawl.pk],
            services.crawl_progress(crawl, stats[crawl.pk]),
            durations[crawl.pk],
        )
        for crawl in page
    ]
    no_crawls = not rows and not query.filtered and not visible_crawls(request.user).exists()
    return render(
        request,
        "crawls/crawl_list.html",
        {
            "nav": "crawls",
            "page": page,
            "rows": rows,
            "query": query,
            "states": CrawlState.choices,
            "channels": Channel.objects.all(),
            "sorts": [
                (value, label) for value, (label, _) in listing.sorts_for(staff=staff).items()
            ],
            "show_owner": staff,
            # The list's parameters without the page number, for the pager's links.
            "filters": urlencode(query.params()),
            "no_crawls": no_crawls,
            "demo_refused": _demo_refused(request) if no_crawls else "",
            "demo_pages": DEMO_PAGES,
        },
    )


def _demo_refused(request: HttpRequest) -> str:
    """Why the private-network guard would refuse the demo's seed here; "" when it would not.

    The demo crawls the sample site at this server's own URL, so behind a public name (the
    usual production setup) the guard lets it through like any public site. Served on a
    private or loopback address, it is refused, and no exemption is made for "our own origin":
    that origin comes from the Host header (checked only against ALLOWED_HOSTS, which may be
    "*"), and the workers check every URL and redirect again with nothing to tell a demo's
    fetch from another crawl's, so an exemption would be a hole for any crawl of that origin.
    """
    if not settings.CRAWLHUB_BLOCK_PRIVATE_NETWORKS:
        return ""
    try:
        netguard.check_url(request.build_absolute_uri("/sample/"))
    except netguard.BlockedAddress as exc:
        return str(exc)
    return ""


@require_POST
def crawl_demo(request: HttpRequest) -> HttpResponse:
    """Create and start a crawl of the sample site crawlhub serves itself under /sample/."""
    seed = request.build_absolute_uri("/sample/")
    refused = _demo_refused(request)
    if refused:
        messages.error(
            request,
            f"The demo crawls this server's own sample site, {seed}, and "
            f"the private-network guard refuses it: {refused}.",
        )
        return redirect("crawl_list")
    try:
        crawl = services.crawl_create(
            user=request.user,
            name="Demo: the sample site",
            seeds=[seed],
            # The sample site's links stay under /sample/; never wander into the dashboard.
            include_patterns=["^" + re.escape(seed)],
            max_pages=1000,  # above the site's 317 URLs, so the demo finishes on its own
            max_depth=20,
            threads=4,
            slices=2,
        )
    except ValidationError as exc:  # e.g. a Host header that makes no crawlable URL
        messages.error(request, "The demo crawl could not be created: " + " ".join(exc.messages))
        return redirect("crawl_list")
    ok, text = _act(request, services.crawl_start, crawl, "Demo crawl started.")
    (messages.success if ok else messages.error)(request, text)
    return redirect(crawl)


def crawl_new(request: HttpRequest) -> HttpResponse:
    form = CrawlForm(request.POST or None, request.FILES or None)
    if request.method == "POST" and form.check():
        auth = form.auth()  # takes the Authentication section's inputs out of cleaned_data
        values = dict(form.cleaned_data)
        start_now = values.pop("start_now")
        try:
            crawl = services.crawl_create(user=request.user, auth=auth, **values)
        except ValidationError as exc:  # only what changed since the check (a channel deleted)
            add_service_errors(form, exc)
        else:
            if start_now:
                ok, text = _act(request, services.crawl_start, crawl, "Crawl started.")
                (messages.success if ok else messages.error)(request, text)
            return redirect(crawl)
    return render(request, "crawls/crawl_new.html", {"nav": "crawls", "form": form})


def _seeds_typed_key(crawl: Crawl) -> str:
    return f"crawl-{crawl.pk}-seeds-typed"


def crawl_detail(request: HttpRequest, pk: int) -> HttpResponse:
    crawl = get_object_or_404(
        visible_crawls(request.user).select_related("channel", "created_by", "auth"), pk=pk
    )
    return crawl_page(request, crawl)


def crawl_page(
    request: HttpRequest,
    crawl: Crawl,
    *,
    alert_form: AlertRuleForm | None = None,
    status: int = 200,
) -> HttpResponse:
    """The crawl's page; with `alert_form`, the alert rule form as it was sent (its errors)."""
    snapshot = live.snapshot(crawl)
    shown = services.credentials_shown(crawl)
    return render(
        request,
        "crawls/crawl_detail.html",
        {
            "nav": "crawls",
            "crawl": crawl,
            "settings": settings_rows(crawl, shown),
            "credentials": shown,
            "can_enter_credentials": services.can_enter_credentials(crawl, request.user),
            "can_edit": services.can_edit(crawl),
            "can_change_live": services.can_change_live(crawl),
            "snapshot": snapshot,
            "stats": snapshot["stats"],
            "change_counts": changes.change_counts(crawl) if crawl.is_over() else None,
            "seeds_typed": request.session.pop(_seeds_typed_key(crawl), ""),
            **_activity(crawl),
            **_alerts(request, crawl, alert_form),
        },
        status=status,
    )


# The alert history a crawl's page shows (the API pages through all of it).
ALERTS_SHOWN = 50


def _alerts(request: HttpRequest, crawl: Crawl, form: AlertRuleForm | None) -> dict:
    rules = list(alerts.rules_for(crawl))
    return {
        "alert_rules": rules,
        "alert_rules_changeable": {r.pk for r in rules if alerts.can_change(request.user, r)},
        "alert_history": crawl.alerts.select_related("rule")[:ALERTS_SHOWN],
        "alert_form": form or AlertRuleForm(user=request.user, crawl=crawl),
        "alert_check_seconds": settings.CRAWLHUB_ALERTS_SECONDS,
    }


def crawl_snapshot(request: HttpRequest, pk: int) -> JsonResponse:
    """The live page's snapshot, for polling: the same one the websocket pushes."""
    crawl = get_object_or_404(visible_crawls(request.user), pk=pk)
    return JsonResponse(live.snapshot(crawl))


def crawl_activity(request: HttpRequest, pk: int) -> HttpResponse:
    """The recent pages, errors, failure queue and audit trail of the live page, as HTML the
    page swaps in when the counters say they changed."""
    crawl = get_object_or_404(visible_crawls(request.user), pk=pk)
    return render(request, "crawls/_activity.html", {"crawl": crawl, **_activity(crawl)})


def _activity(crawl: Crawl) -> dict:
    # Errors as the Errors counter counts them: no HTTP answer (these pages), or retries used
    # up (the failure queue, listed apart). A 404 is a response, in its status class.
    errors = crawl.pages.filter(status__isnull=True)
    return {
        "pages": crawl.pages.order_by("-id")[:RECENT_ROWS],
        "errors": errors.order_by("-id")[:RECENT_ROWS],
        "failures": crawl.failures.all()[:FAILURES_SHOWN],
        "failures_total": crawl.failures.count(),
        "events": log_page(crawl, LogFilter(), size=EVENTS_SHOWN).lines,
    }


def _act(request: HttpRequest, action, crawl: Crawl, done: str, **kwargs) -> tuple[bool, str]:
    """Run a service action; (worked, what to tell the user)."""
    try:
        result = action(crawl=crawl, user=request.user, **kwargs)
    except services.CrawlActionError as exc:
        return False, str(exc)
    except ValidationError as exc:
        return False, " ".join(exc.messages)
    except REDIS_ERRORS as exc:
        return False, f"Redis is not reachable, nothing was changed: {exc}"
    return True, done.format(result=result)


ACTIONS = {
    "start": (services.crawl_start, "Crawl started."),
    "pause": (services.crawl_pause, "Pausing: workers stop fetching within seconds."),
    "resume": (services.crawl_resume, "Crawl resumed."),
    "cancel": (services.crawl_cancel, "Crawl cancelled; its pages are kept."),
}


# The host view's buttons (crawl_hosts): the host comes as a form field.
HOST_ACTIONS = {
    "host-hold": (services.crawl_host_hold, "{host} held until the time in its row."),
    "host-release": (services.crawl_host_release, "{host} released."),
    "host-drop": (services.crawl_host_drop, "{host}: {result} queued request(s) dropped."),
}


def crawl_hosts(request: HttpRequest, pk: int) -> HttpResponse:
    """Every host of the crawl: queued, in flight, done, errors, its delay now, when it may be
    asked next and why it is slowed; hold, release and drop buttons while the crawl runs."""
    crawl = get_object_or_404(visible_crawls(request.user), pk=pk)
    try:
        hosts, problem = services.crawl_hosts(crawl), ""
    except REDIS_ERRORS as exc:
        hosts, problem = [], f"Redis is not reachable: {exc}"
    can_act = not crawl.is_over() and crawl.state != CrawlState.DRAFT
    asked = request.GET.get("drop", "") if can_act else ""
    confirm_drop = next((h for h in hosts if asked and h["host"] == asked and h["queued"]), None)
    return render(
        request,
        "crawls/crawl_hosts.html",
        {
            "nav": "crawls",
            "crawl": crawl,
            "hosts": hosts,
            "problem": problem,
            "can_act": can_act,
            "confirm_drop": confirm_drop,
        },
    )


def _ids(values: list[str]) -> list[int]:
    """The values that are whole numbers; others ('²', 5,000 digits) are skipped."""
    ids = []
    for value in values:
        try:
            ids.append(int(value))
        except ValueError:
            continue
    return ids


@require_POST
def crawl_action(request: HttpRequest, pk: int, action: str) -> HttpResponse:
    """Buttons post here. A page's script asks for JSON (and stays put: the websocket shows
    the result); without script, a message and a redirect back."""
    crawl = get_object_or_404(visible_crawls(request.user).select_related("channel"), pk=pk)
    if action == "add-seeds":
        ok, text = _act(
            request,
            services.crawl_add_seeds,
            crawl,
            "Seeds added: {result[0]} new, {result[1]} already seen.",
            urls=request.POST.get("urls", ""),
        )
        if not ok:  # the crawl page shows what was typed again, to correct rather than retype
            request.session[_seeds_typed_key(crawl)] = request.POST.get("urls", "")[:100_000]
        if ok and (left_out := services.credentials_left_out(crawl)):
            text += (
                f" The saved credentials are not sent to {', '.join(left_out)}: they stay "
                "bound to the origins they were entered for, unless the crawl's owner enters "
                "them again."
            )
    elif action == "retry-failed":
        ids = _ids(request.POST.getlist("id")) or None
        ok, text = _act(
            request,
            services.crawl_retry_failed,
            crawl,
            "{result} request(s) back in the queue.",
            ids=ids,
        )
    elif action == "host-drop" and request.POST.get("confirm") != "yes":
        # Asked first: one click used to throw away the host's whole queue.
        query = urlencode({"drop": request.POST.get("host", "")})
        return redirect(f"{reverse('crawl_hosts', args=[crawl.pk])}?{query}")
    elif action in HOST_ACTIONS:
        fn, done = HOST_ACTIONS[action]
        fields = {"host": request.POST.get("host", "")}
        if action == "host-hold":
            fields["minutes"] = request.POST.get("minutes", "")
        ok, text = _act(request, fn, crawl, done.replace("{host}", fields["host"]), **fields)
    elif action in ACTIONS:
        fn, done = ACTIONS[action]
        ok, text = _act(request, fn, crawl, done)
    else:
        ok, text = False, f"Unknown action {action!r}."
    crawl.refresh_from_db()
    if ok and action == "pause" and crawl.state == CrawlState.PAUSED:
        # Nothing was in flight, or the slices ended since: no "pausing" to wait for (the
        # answer's snapshot says paused, and the page would keep "Pausing" beside it).
        text = "Paused."
    if "application/json" in request.headers.get("Accept", ""):
        return JsonResponse(
            {"ok": ok, "message": text, "snapshot": live.snapshot(crawl)}, status=200 if ok else 409
        )
    (messages.success if ok else messages.error)(request, text)
    return redirect(next_path(request, fallback=crawl.get_absolute_url()))


@require_POST
def rules_preview(request: HttpRequest) -> JsonResponse:
    """The new-crawl page's "Try on a URL": what each rule yields on one page, fetched with
    the crawl form's fetch settings (left empty: the defaults). Errors name the field:
    {"errors": {field: [...]}}."""
    form = CrawlForm()
    values, errors = {}, {}
    for name in ("extract_rules", "channel", *services.PREVIEW_OPTIONS):
        raw = request.POST.get(name, "")
        if name != "extract_rules" and not raw.strip():
            continue
        try:
            values[name] = form.fields[name].clean(raw)
        except ValidationError as exc:
            errors[name] = exc.messages
    if errors:
        return JsonResponse({"errors": errors}, status=400)
    try:
        result = services.rules_preview(
            url=request.POST.get("preview_url", ""), rules=values.pop("extract_rules"), **values
        )
    except ValidationError as exc:
        return JsonResponse({"errors": exc.message_dict}, status=400)
    return JsonResponse(result)
