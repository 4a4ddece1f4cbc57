from django.apps import AppConfig


class CrawlhubConfig(AppConfig):
    name = "crawlhub"
    verbose_name = "crawlhub"
