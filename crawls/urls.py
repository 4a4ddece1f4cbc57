from django.urls import path

from crawls import views

urlpatterns = [
    path("", views.crawl_list, name="crawl_list"),
]
