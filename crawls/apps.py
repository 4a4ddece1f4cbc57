from django.apps import AppConfig


class CrawlsConfig(AppConfig):
    name = "crawls"

    def ready(self) -> None:
        # Django's place for connecting signals: the models are loaded by now.
        from django.db.models.signals import post_save

        from crawls import page_search, signals, webhooks
        from crawls.models import Page

        signals.crawl_ended.connect(webhooks.on_crawl_ended, dispatch_uid="crawls.webhooks")
        post_save.connect(page_search.index_saved_page, sender=Page, dispatch_uid="crawls.text")
