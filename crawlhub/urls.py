from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from crawlhub import views

urlpatterns = [
    path("", include("crawls.urls")),
    path("proxies/", include("proxies.urls")),
    path("workers/", views.workers_page, name="workers"),
    path("healthz", views.healthz, name="healthz"),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    # django-rq's views are staff-only themselves.
    path("rq/", include("django_rq.urls")),
]
