"""The forms of the crawl pages (the field each crawl option gets: option_fields.py). They
parse input only; the services validate it and say what is wrong (add_service_errors puts
their messages on the form)."""

from __future__ import annotations

import re

from django import forms
from django.conf import settings
from django.core.exceptions import ValidationError

from crawls import schedules
from crawls.engine import credentials
from crawls.engine.credentials import INPUTS as AUTH_INPUTS
from crawls.models import (
    CRAWL_OPTIONS,
    AlertKind,
    Channel,
    Crawl,
    WebhookEvent,
)
from crawls.services import crawl_problems, rendering_problem, visible_crawls
from crawls.views.option_fields import crawl_formfield


class SecretTextarea(forms.Textarea):
    """A textarea that never renders its value: a secret typed once is not shown again, not
    even on the page that says another field was wrong."""

    def format_value(self, value) -> None:
        return None


MAX_COOKIES_TXT_BYTES = 1024 * 1024
_CODE = {"rows": 2, "spellcheck": "false", "autocomplete": "off"}


class AuthFields(forms.Form):
    """The crawl form's Authentication section: the inputs of services.clean_credentials
    (credentials.INPUTS), which parses and checks them. Secrets are write-only fields."""

    headers = forms.CharField(
        required=False,
        label="Extra headers",
        widget=SecretTextarea(attrs={**_CODE, "placeholder": "X-Api-Key: ..."}),
        help_text="One 'Name: value' a line. Values are secret: not shown again.",
    )
    cookie = forms.CharField(
        required=False,
        label="Cookie",
        widget=SecretTextarea(attrs={**_CODE, "placeholder": "session=...; theme=dark"}),
        help_text="A Cookie header's value, name=value pairs separated by ';'. Secret.",
    )
    cookies_txt = forms.FileField(
        required=False,
        label="cookies.txt",
        help_text="A Netscape cookies.txt (what browser extensions and curl export); only the "
        "cookies of the seeds' hosts are kept. Secret.",
    )
    basic_user = forms.CharField(required=False, label="Basic auth user", max_length=200)
    basic_password = forms.CharField(
        required=False,
        label="Basic auth password",
        widget=forms.PasswordInput(render_value=False),
        help_text="Secret: not shown again.",
    )
    login_url = forms.CharField(
        required=False,
        label="Login page URL",
        help_text="On a seed's host. Its form is sent before the crawl, and again when a page "
        "redirects to this URL (the session expired).",
    )
    login_fields = forms.CharField(
        required=False,
        label="Login form fields",
        widget=SecretTextarea(attrs={**_CODE, "placeholder": "username=alice\npassword=..."}),
        help_text="One name=value a line, as the form's inputs are named; hidden inputs (a CSRF "
        "token) are taken from the page. Values are secret.",
    )
    login_check_selector = forms.CharField(
        required=False,
        label="Logged in when this CSS selector is on the page",
        help_text="E.g. a.logout; checked on the page the login ends on.",
    )
    login_check_url = forms.CharField(
        required=False,
        label="Logged in when the login ends on this URL",
        help_text="Empty with no selector either: any answer below 400 that is not the login page.",
    )

    def clean_cookies_txt(self) -> str:
        upload = self.cleaned_data.get("cookies_txt")
        if not upload:
            return ""
        if upload.size > MAX_COOKIES_TXT_BYTES:
            raise ValidationError(
                f"cookies.txt is {upload.size:,} bytes; at most {MAX_COOKIES_TXT_BYTES:,}."
            )
        try:
            return upload.read().decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise ValidationError(
                f"cookies.txt is not UTF-8 text (byte {exc.start + 1} is not): is it the right "
                "file?"
            ) from None

    def secrets_to_retype(self) -> bool:
        """A refused form that held secrets: they are not shown again, so say to retype them."""
        return (
            self.is_bound
            and bool(self.errors)
            and any(self.data.get(name) or self.files.get(name) for name in SECRET_INPUTS)
        )

    def auth_fields(self) -> list[forms.BoundField]:
        return [self[name] for name in AUTH_INPUTS]


SECRET_INPUTS = ("headers", "cookie", "cookies_txt", "basic_password", "login_fields")


# The options templates/crawls/crawl_new.html places in its sections by hand.
LAID_OUT = frozenset(
    {
        "allowed_domains",
        "include_patterns",
        "exclude_patterns",
        "max_depth",
        "max_pages",
        "priority",
        "threads",
        "slices",
        "host_delay",
        "host_concurrency",
        "timeout",
        "max_bytes",
        "max_retries",
        "user_agent_mode",
        "user_agent",
        "obey_robots",
        "keep_bodies",
        "extract_rules",
        "keep_structured_data",
        "follow_sitemaps",
        "render_javascript",
        "render_wait_selector",
    }
)


# What the draft's "remove" box says of each kind of saved credentials (credentials.masked).
def _saved_text(kind: str, shown: dict) -> str:
    if kind == "basic_auth":
        return f"user {shown.get('basic_user')}"
    if kind == "login":
        return f"at {shown.get('login_url')}"
    return ", ".join(shown.get(kind) or [])


CRAWL_FIELDS = frozenset({"name", "channel", "seeds", *CRAWL_OPTIONS})
# Where credentials.masked says that a kind of credentials is saved.
SAVED_KEY = {
    "headers": "headers",
    "cookies": "cookies",
    "basic_auth": "basic_user",
    "login": "login_url",
}


class CrawlForm(forms.ModelForm, AuthFields):
    """Parses input only; crawl_create validates seeds and patterns and says what is wrong.
    Its option fields come from the model (CRAWL_OPTIONS, through crawl_formfield); its
    Authentication section from AuthFields (the crawl's credentials, kept apart). A draft
    with saved credentials (`saved`: credentials.masked of them) gets a "remove" box for each
    kind it has, named by what the crawl page shows of it (names, never values)."""

    seeds = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3, "placeholder": "https://example.com/"}),
        help_text="One URL per line.",
    )
    start_now = forms.BooleanField(required=False, initial=True, label="Start now")

    class Meta:
        model = Crawl
        fields = ["name", "channel", "seeds", *CRAWL_OPTIONS]
        formfield_callback = crawl_formfield

    def __init__(self, *args, saved: dict | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["channel"].queryset = Channel.objects.all()
        self.fields["channel"].initial = Channel.default().pk
        if problem := rendering_problem():  # said where the option is, before anyone picks it
            self.fields["render_javascript"].help_text = f"Not available here: {problem}"
        self.saved = saved or {}
        for kind, key in SAVED_KEY.items():
            if not self.saved.get(key):
                continue
            words = credentials.KINDS[kind][0]
            self.fields[f"remove_{kind}"] = forms.BooleanField(
                required=False,
                label=f"Remove the saved {words} ({_saved_text(kind, self.saved)})",
            )

    def clean(self) -> dict:
        data = super().clean()
        asked = self.removals()
        given = {name: data.get(name) for name in AUTH_INPUTS}
        for kind, message in credentials.removal_conflicts(given, asked).items():
            self.add_error(f"remove_{kind}", message)
        return data

    def removals(self) -> list[str]:
        """The kinds of saved credentials the draft's "remove" boxes ask to remove."""
        return [kind for kind in credentials.KINDS if self.cleaned_data.get(f"remove_{kind}")]

    def check(self) -> bool:
        """True when the crawl can be saved. Otherwise every problem is on the form at once:
        what could not be read (a number that is no number), and what the services refuse in
        everything that could (checked with crawl_problems, in the same round)."""
        if not self.is_bound:  # a POST with no fields at all: the empty form again
            return False
        readable = self.is_valid()
        values = {k: v for k, v in self.cleaned_data.items() if k in CRAWL_FIELDS}
        auth = {k: v for k, v in self.cleaned_data.items() if k in AUTH_INPUTS}
        problems = crawl_problems(
            name=values.pop("name", ""), seeds=values.pop("seeds", ""), auth=auth, **values
        )
        for field, errors in problems.items():
            if field in self.errors:
                continue  # its input could not be read: that is what it says
            if field == "seeds" and "seeds" not in self.cleaned_data:
                continue
            for error in errors:
                self.add_error(field if field in self.fields else None, error)
        return readable and not problems

    def remove_fields(self) -> list[forms.BoundField]:
        return [self[name] for name in self.fields if name.startswith("remove_")]

    def _post_clean(self) -> None:
        """Model validation happens in crawl_create, the one place every door goes through."""

    def auth(self) -> dict[str, str]:
        """The Authentication section's inputs, taken out of cleaned_data (the "remove" boxes
        too: removals() has read them)."""
        for name in [name for name in self.cleaned_data if name.startswith("remove_")]:
            del self.cleaned_data[name]
        return {name: self.cleaned_data.pop(name, "") or "" for name in AUTH_INPUTS}

    def error_summary(self) -> list[tuple[str, str, str]]:
        """Every error of the form, field by field in the form's order: (the field's id, or ""
        for the form as a whole; its label; the message), for the list on top of the page."""
        found = [("", "", error) for error in self.non_field_errors()]
        for name in self.fields:
            for error in self.errors.get(name, []):
                found.append((self[name].id_for_label, str(self[name].label), error))
        return found

    def more_options(self) -> list[forms.BoundField]:
        """Options the new-crawl page does not lay out by hand: shown under "More options",
        so that an option added to the model needs no change to the page."""
        return [self[name] for name in CRAWL_OPTIONS if name not in LAID_OUT]


class ScheduleForm(forms.Form):
    template = forms.ModelChoiceField(
        queryset=Crawl.objects.none(),
        help_text="Each run copies this crawl's seeds and options, and its credentials only "
        "if the crawl is yours (bound to the origins they were entered for).",
    )
    cron = forms.CharField(
        max_length=100,
        initial="0 3 * * *",
        help_text=f"minute hour day-of-month month day-of-week, in {settings.TIME_ZONE}; "
        "or @hourly, @daily, @weekly.",
    )
    enabled = forms.BooleanField(required=False, initial=True)

    def __init__(self, *args, user, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["template"].queryset = schedules.template_choices(user)

    def clean_cron(self) -> str:
        """Checked here too, so that a bad expression is said with a missing template, in the
        same round (schedule_create checks it again for every other door)."""
        try:
            return schedules.clean_cron(self.cleaned_data["cron"])
        except ValidationError as exc:
            raise ValidationError(exc.message_dict["cron"]) from None


class WebhookForm(forms.Form):
    url = forms.CharField(
        max_length=2000,
        label="URL",
        help_text="Gets a POST with JSON, signed with the webhook's secret.",
    )
    events = forms.MultipleChoiceField(
        choices=WebhookEvent.choices,
        initial=WebhookEvent.values,
        widget=forms.CheckboxSelectMultiple,
    )
    crawl = forms.ModelChoiceField(queryset=Crawl.objects.none(), required=False)
    channel = forms.ModelChoiceField(
        queryset=Channel.objects.none(),
        required=False,
        help_text="Staff: every crawl of a channel.",
    )

    def __init__(self, *args, user, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["crawl"].queryset = visible_crawls(user)
        if user.is_staff:
            self.fields["channel"].queryset = Channel.objects.all()
        else:
            del self.fields["channel"]


class AlertRuleForm(forms.Form):
    """A rule's condition and who is told. The figures and the addresses are checked by
    crawls/alerts.py, the same for every door: this form only parses them."""

    kind = forms.ChoiceField(choices=AlertKind.choices, label="When")
    # Text, checked by the service with the minutes and the addresses: every error at once.
    percent = forms.CharField(
        required=False,
        label="N (error rate, %)",
        max_length=20,
        help_text="Error rate: fires when N% or more of the requests done in the last M "
        "minutes got no answer.",
    )
    minutes = forms.CharField(
        required=False,
        label="M (minutes)",
        max_length=20,
        help_text="Error rate and no progress: the window, in minutes.",
    )
    emails = forms.CharField(
        required=False,
        label="E-mail to",
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Addresses, one per line or separated by commas. Webhooks that want the "
        "“alert” event are told too.",
    )
    crawl = forms.ModelChoiceField(queryset=Crawl.objects.none(), required=False)
    channel = forms.ModelChoiceField(
        queryset=Channel.objects.none(),
        required=False,
        help_text="Staff: every crawl of a channel.",
    )

    def __init__(self, *args, user, crawl: Crawl | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if crawl is not None:
            # On a crawl's page: the rule is that crawl's.
            del self.fields["crawl"], self.fields["channel"]
            return
        self.fields["crawl"].queryset = visible_crawls(user)
        if user.is_staff:
            self.fields["channel"].queryset = Channel.objects.all()
        else:
            del self.fields["channel"]

    def clean_emails(self) -> list[str]:
        return [
            part.strip()
            for part in re.split(r"[,;\s]+", self.cleaned_data["emails"])
            if part.strip()
        ]


def add_service_errors(form: forms.Form, exc: ValidationError) -> None:
    """The messages of a service's ValidationError, on their fields (or the whole form)."""
    for field, errors in exc.message_dict.items():
        for error in errors:
            form.add_error(field if field in form.fields else None, error)
