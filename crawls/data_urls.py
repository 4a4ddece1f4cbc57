"""Routes of a crawl's data: export downloads, schedules, webhooks."""

from django.urls import path

from crawls import data_views

urlpatterns = [
    path("crawls/<int:pk>/export.<str:fmt>", data_views.crawl_export, name="crawl_export"),
    path("schedules/", data_views.schedule_list, name="schedule_list"),
    path("schedules/new/", data_views.schedule_new, name="schedule_new"),
    path("schedules/<int:pk>/", data_views.schedule_detail, name="schedule_detail"),
    path("webhooks/", data_views.webhook_list, name="webhook_list"),
    path("webhooks/<int:pk>/", data_views.webhook_detail, name="webhook_detail"),
]
