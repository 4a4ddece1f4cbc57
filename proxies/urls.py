from django.urls import path

from proxies import views

urlpatterns = [
    path("", views.proxy_list, name="proxy_list"),
]
