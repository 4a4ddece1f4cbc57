from django.apps import AppConfig


class CrawlsConfig(AppConfig):
    name = "crawls"

    def ready(self) -> None:
        # Django's place for connecting signals: the models are loaded by now.
        from crawls import signals, webhooks

        signals.crawl_ended.connect(webhooks.on_crawl_ended, dispatch_uid="crawls.webhooks")
