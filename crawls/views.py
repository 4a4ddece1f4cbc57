from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


def crawl_list(request: HttpRequest) -> HttpResponse:
    return render(request, "crawls/crawl_list.html", {})
