from django.apps import AppConfig


class ProxiesConfig(AppConfig):
    name = "proxies"
    verbose_name = "proxy pool"
