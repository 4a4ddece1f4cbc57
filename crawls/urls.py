from django.urls import path

from crawls import views

urlpatterns = [
    path("", views.crawl_list, name="crawl_list"),
    path("crawls/new/", views.crawl_new, name="crawl_new"),
    path("crawls/<int:pk>/", views.crawl_detail, name="crawl_detail"),
    path("crawls/<int:pk>/snapshot.json", views.crawl_snapshot, name="crawl_snapshot"),
    path("crawls/<int:pk>/activity", views.crawl_activity, name="crawl_activity"),
    path("crawls/demo/", views.crawl_demo, name="crawl_demo"),
    path("crawls/<int:pk>/<str:action>/", views.crawl_action, name="crawl_action"),
]
