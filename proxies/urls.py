from django.urls import path

from proxies import views

urlpatterns = [
    path("", views.proxy_list, name="proxy_list"),
    path("action", views.proxy_action, name="proxy_action"),
    path("import", views.proxy_import, name="proxy_import"),
    path("<int:pk>/", views.proxy_detail, name="proxy_detail"),
    path("jobs/<int:pk>/", views.proxy_job, name="proxy_job"),
    path("jobs/<int:pk>.json", views.proxy_job_status, name="proxy_job_status"),
    path("echo", views.echo, name="proxy_echo"),
]
