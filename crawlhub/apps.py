from django.apps import AppConfig

# Registers the `in` lookup that matches nothing for out-of-range integers (see the module).
from crawlhub.web import lookups  # noqa: F401


class CrawlhubConfig(AppConfig):
    name = "crawlhub"
    verbose_name = "crawlhub"
