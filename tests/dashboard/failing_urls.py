"""crawlhub's routes plus two views that fail, for the 500 page's tests (no view of the
product fails on purpose); the handlers are the product's own."""

from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest
from django.urls import path

from crawlhub import urls as product


def boom(request: HttpRequest):
    raise RuntimeError("a view that fails, for the test")


urlpatterns = [
    path("boom/", boom),
    path("login-free-boom/", login_not_required(boom)),
    *product.urlpatterns,
]
handler404 = getattr(product, "handler404", "django.views.defaults.page_not_found")
handler500 = getattr(product, "handler500", "django.views.defaults.server_error")
