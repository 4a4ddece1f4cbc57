"""Channels: groups of crawls sharing politeness defaults and a proxy pool, and the choices
they share with a crawl's options (user agent, proxies)."""

from __future__ import annotations

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from crawls.models.fields import RulesField


class UserAgentMode(models.TextChoices):
    FIXED = "fixed", "Fixed string"
    RANDOM = "random", "Random per request"


class ProxyUse(models.TextChoices):
    OFF = "off", "No proxy"
    POOL = "pool", "From the proxy pool"


class ProxyStrategy(models.TextChoices):
    LEAST_USED = "least_used", "Least used (per request)"
    ROUND_ROBIN = "round_robin", "Round robin (per request)"
    GREEDY = "greedy", "Greedy (keep a fast proxy)"


class Channel(models.Model):
    """A group of crawls sharing politeness defaults and a proxy pool."""

    slug = models.SlugField(max_length=50, unique=True)
    name = models.CharField(max_length=100)
    description = models.TextField(blank=True)
    proxy_use = models.CharField(max_length=10, choices=ProxyUse, default=ProxyUse.OFF)
    proxy_strategy = models.CharField(
        max_length=20, choices=ProxyStrategy, default=ProxyStrategy.LEAST_USED
    )
    host_delay = models.FloatField(
        default=0.0,
        validators=[MinValueValidator(0.0), MaxValueValidator(3600.0)],
        help_text="Default seconds between two requests to one host.",
    )
    host_concurrency = models.PositiveIntegerField(
        default=8,
        validators=[MinValueValidator(1), MaxValueValidator(256)],
        help_text="Default requests in flight to one host.",
    )
    user_agent_mode = models.CharField(
        max_length=10, choices=UserAgentMode, default=UserAgentMode.RANDOM
    )
    extract_rules = RulesField(
        default=list,
        blank=True,
        help_text="Default extraction rules of this channel's crawls (a crawl's own replace them).",
    )
    render_javascript = models.BooleanField(
        default=False,
        help_text="Crawls of this channel render pages in headless Chromium unless they say no.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @classmethod
    def default(cls) -> Channel:
        channel, _ = cls.objects.get_or_create(slug="default", defaults={"name": "Default"})
        return channel
