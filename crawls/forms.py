from django import forms

from crawls.models import Channel, Crawl, UserAgentMode


class LinesField(forms.CharField):
    """One value per line in a textarea; a list in cleaned_data."""

    widget = forms.Textarea(attrs={"rows": 3})

    def to_python(self, value) -> list[str]:
        text = super().to_python(value) or ""
        return [line.strip() for line in text.splitlines() if line.strip()]


class CrawlForm(forms.ModelForm):
    """Parses input only; crawl_create validates seeds and patterns and says what is wrong."""

    seeds = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3, "placeholder": "https://example.com/"}),
        help_text="One URL per line.",
    )
    allowed_domains = LinesField(
        required=False, help_text="One per line; subdomains included. Empty: the seeds' hosts."
    )
    include_patterns = LinesField(
        required=False, help_text="Regular expressions; when given, a URL must match one."
    )
    exclude_patterns = LinesField(
        required=False, help_text="Regular expressions; a URL matching one is skipped."
    )
    user_agent_mode = forms.ChoiceField(
        choices=[("", "The channel's")] + list(UserAgentMode.choices), required=False
    )
    start_now = forms.BooleanField(required=False, initial=True, label="Start now")

    class Meta:
        model = Crawl
        fields = [
            "name", "channel", "seeds", "allowed_domains", "include_patterns",
            "exclude_patterns", "max_depth", "max_pages", "priority", "threads", "slices",
            "host_delay", "obey_robots", "user_agent_mode", "user_agent", "timeout",
            "max_bytes", "max_retries", "keep_bodies",
        ]  # fmt: skip

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["channel"].queryset = Channel.objects.all()
        self.fields["channel"].initial = Channel.default().pk

    def _post_clean(self) -> None:
        """Model validation happens in crawl_create, the one place every door goes through."""
