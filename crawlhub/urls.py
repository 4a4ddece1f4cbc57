from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from crawlhub import api, views

urlpatterns = [
    path("", include("crawls.urls")),
    # A page of the dashboard (its login, its layout), before the API's own routes.
    path("api/docs/", api.api_docs_page, name="api_docs"),
    path("api/", include("crawlhub.api")),
    path("account/tokens/", api.token_page, name="api_tokens"),
    path("account/tokens/<int:pk>/revoke", api.token_revoke_page, name="api_token_revoke"),
    path("proxies/", include("proxies.urls")),
    path("healthz", views.healthz, name="healthz"),
    path("favicon.ico", views.favicon, name="favicon"),
    path("sample/", views.sample_site, name="sample_site"),
    path("sample/<path:path>", views.sample_site),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    # django-rq's views are staff-only themselves.
    path("rq/", include("django_rq.urls")),
]

# A body too large, too many fields, an unreadable form: said in words (JSON on the API).
handler400 = "crawlhub.web.bad_requests.bad_request"
# crawlhub's own pages, with its nav (JSON under /api/).
handler403 = "crawlhub.web.error_pages.forbidden"
handler404 = "crawlhub.web.error_pages.not_found"
handler500 = "crawlhub.web.error_pages.server_error"
