from django.apps import AppConfig


class CrawlsConfig(AppConfig):
    name = "crawls"
