"""Serializer fields the crawl API's endpoints share."""

from __future__ import annotations

from django.db.models import QuerySet
from rest_framework import serializers

from crawls.models import Crawl

# Runs of a schedule and deliveries of a webhook shown on its detail, newest first.
RECENT = 20


class CrawlField(serializers.PrimaryKeyRelatedField):
    """A crawl id, looked up among `crawls_for(user)` for the user making the request: any other
    crawl is an unknown id."""

    def __init__(self, crawls_for, **kwargs) -> None:
        self.crawls_for = crawls_for
        super().__init__(queryset=Crawl.objects.all(), **kwargs)

    def get_queryset(self) -> QuerySet[Crawl]:
        return self.crawls_for(self.context["request"].user)
