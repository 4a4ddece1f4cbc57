"""Routes of the crawl pages: crawls, export downloads, schedules, alerts, webhooks, and the
workers that run them."""

from django.urls import path

from crawls.views import (
    alerts,
    compare,
    crawls,
    editing,
    exports,
    log,
    pages,
    queue,
    schedules,
    webhooks,
    workers,
)

urlpatterns = [
    path("", crawls.crawl_list, name="crawl_list"),
    path("crawls/new/", crawls.crawl_new, name="crawl_new"),
    path("crawls/<int:pk>/", crawls.crawl_detail, name="crawl_detail"),
    path("crawls/<int:pk>/snapshot.json", crawls.crawl_snapshot, name="crawl_snapshot"),
    path("crawls/<int:pk>/activity", crawls.crawl_activity, name="crawl_activity"),
    path("crawls/<int:pk>/hosts/", crawls.crawl_hosts, name="crawl_hosts"),
    path("crawls/<int:pk>/queue/", queue.crawl_queue, name="crawl_queue"),
    path("crawls/<int:pk>/log/", log.crawl_log, name="crawl_log"),
    path("crawls/demo/", crawls.crawl_demo, name="crawl_demo"),
    path("crawls/<int:pk>/export.<str:fmt>", exports.crawl_export, name="crawl_export"),
    path(
        "crawls/<int:pk>/failures.<str:fmt>", exports.failures_export, name="crawl_failures_export"
    ),
    path("crawls/<int:pk>/pages/", pages.page_list, name="page_list"),
    path("crawls/<int:pk>/pages/<int:page_pk>/", pages.page_detail, name="page_detail"),
    path("crawls/<int:pk>/pages/<int:page_pk>/body", pages.page_body, name="page_body"),
    path("crawls/compare/", compare.compare, name="crawl_compare"),
    path("crawls/compare/export.csv", compare.compare_export, name="crawl_compare_export"),
    path("crawls/preview/", crawls.rules_preview, name="rules_preview"),
    path("crawls/<int:pk>/edit/", editing.crawl_edit, name="crawl_edit"),
    path("crawls/<int:pk>/again/", editing.crawl_run_again, name="crawl_run_again"),
    path("crawls/<int:pk>/credentials/", editing.crawl_credentials, name="crawl_credentials"),
    path("crawls/<int:pk>/delete/", editing.crawl_delete_confirm, name="crawl_delete"),
    path("crawls/<int:pk>/alerts/", alerts.crawl_alert_rule_new, name="crawl_alert_rule_new"),
    path("crawls/<int:pk>/<str:action>/", crawls.crawl_action, name="crawl_action"),
    path("schedules/", schedules.schedule_list, name="schedule_list"),
    path("schedules/new/", schedules.schedule_new, name="schedule_new"),
    path("schedules/<int:pk>/", schedules.schedule_detail, name="schedule_detail"),
    path("alerts/", alerts.alert_rule_list, name="alert_rule_list"),
    path("alerts/<int:pk>/", alerts.alert_rule_action, name="alert_rule_action"),
    path("webhooks/", webhooks.webhook_list, name="webhook_list"),
    path("webhooks/<int:pk>/", webhooks.webhook_detail, name="webhook_detail"),
    path("workers/", workers.workers_page, name="workers"),
]
