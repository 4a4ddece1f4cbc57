from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from crawlhub.access import staff_required


@staff_required
def proxy_list(request: HttpRequest) -> HttpResponse:
    return render(request, "proxies/proxy_list.html", {})
