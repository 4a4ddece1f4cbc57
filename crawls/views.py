from django.contrib import messages
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from crawls import services
from crawls.forms import CrawlForm
from crawls.models import Channel, Crawl, CrawlState

CRAWLS_PER_PAGE = 25


def crawl_list(request: HttpRequest) -> HttpResponse:
    crawls = Crawl.objects.select_related("channel", "created_by")
    state, channel = request.GET.get("state", ""), request.GET.get("channel", "")
    if state:
        crawls = crawls.filter(state=state)
    if channel:
        crawls = crawls.filter(channel__slug=channel)
    page = Paginator(crawls, CRAWLS_PER_PAGE).get_page(request.GET.get("page"))
    stats = services.crawls_stats_safe(list(page))
    rows = [(crawl, stats[crawl.pk]) for crawl in page]
    return render(
        request,
        "crawls/crawl_list.html",
        {
            "nav": "crawls",
            "page": page,
            "rows": rows,
            "states": CrawlState.choices,
            "channels": Channel.objects.all(),
            "state": state,
            "channel": channel,
        },
    )


def crawl_new(request: HttpRequest) -> HttpResponse:
    form = CrawlForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        data = dict(form.cleaned_data)
        start_now = data.pop("start_now")
        name, seeds, channel = data.pop("name"), data.pop("seeds"), data.pop("channel")
        try:
            crawl = services.crawl_create(
                user=request.user, name=name, seeds=seeds, channel=channel, **data
            )
        except ValidationError as exc:
            for field, errors in exc.message_dict.items():
                for error in errors:
                    form.add_error(field if field in form.fields else None, error)
        else:
            if start_now:
                _act(request, services.crawl_start, crawl, "Crawl started.")
            return redirect(crawl)
    return render(request, "crawls/crawl_new.html", {"nav": "crawls", "form": form})


def crawl_detail(request: HttpRequest, pk: int) -> HttpResponse:
    crawl = get_object_or_404(Crawl.objects.select_related("channel", "created_by"), pk=pk)
    return render(
        request,
        "crawls/crawl_detail.html",
        {
            "nav": "crawls",
            "crawl": crawl,
            "stats": services.crawl_stats_safe(crawl),
            "pages": crawl.pages.order_by("-id")[:20],
            "errors": crawl.pages.exclude(error="").order_by("-id")[:20],
            "failures": crawl.failures.all()[:50],
            "events": crawl.events.select_related("user")[:50],
        },
    )


def crawl_snapshot(request: HttpRequest, pk: int) -> JsonResponse:
    crawl = get_object_or_404(Crawl, pk=pk)
    return JsonResponse(services.crawl_snapshot(crawl))


def _act(request: HttpRequest, action, crawl: Crawl, done: str, **kwargs) -> None:
    try:
        result = action(crawl=crawl, user=request.user, **kwargs)
    except services.CrawlActionError as exc:
        messages.error(request, str(exc))
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    except services.REDIS_ERRORS as exc:
        messages.error(request, f"Redis is not reachable, nothing was changed: {exc}")
    else:
        messages.success(request, done.format(result=result))


ACTIONS = {
    "start": (services.crawl_start, "Crawl started."),
    "pause": (services.crawl_pause, "Pausing: workers stop fetching within seconds."),
    "resume": (services.crawl_resume, "Crawl resumed."),
    "cancel": (services.crawl_cancel, "Crawl cancelled; its pages are kept."),
}


@require_POST
def crawl_action(request: HttpRequest, pk: int, action: str) -> HttpResponse:
    crawl = get_object_or_404(Crawl.objects.select_related("channel"), pk=pk)
    if action == "add-seeds":
        _act(request, services.crawl_add_seeds, crawl,
             "Seeds added: {result[0]} new, {result[1]} already seen.",
             urls=request.POST.get("urls", ""))  # fmt: skip
    elif action == "retry-failed":
        ids = [int(i) for i in request.POST.getlist("id") if i.isdigit()] or None
        _act(request, services.crawl_retry_failed, crawl,
             "{result} request(s) back in the queue.", ids=ids)  # fmt: skip
    elif action in ACTIONS:
        fn, done = ACTIONS[action]
        _act(request, fn, crawl, done)
    else:
        messages.error(request, f"Unknown action {action!r}.")
    return redirect(request.POST.get("next") or crawl.get_absolute_url())
