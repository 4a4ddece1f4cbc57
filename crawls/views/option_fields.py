"""How a crawl option is typed on a page: the form field each option gets (crawl_formfield):
one value per line, extraction rules as JSON, a size with its unit, or the channel's default;
the unit shown after a number and the help under it."""

from __future__ import annotations

import json
import re

from django import forms
from django.core.exceptions import ValidationError
from django.db import models
from django.utils.text import capfirst

from crawls.models import MAX_BODY_BYTES, LinesField, RulesField


class LinesFormField(forms.CharField):
    """One value per line in a textarea; a list in cleaned_data."""

    widget = forms.Textarea(attrs={"rows": 3})

    def to_python(self, value) -> list[str]:
        text = super().to_python(value) or ""
        return [line.strip() for line in text.splitlines() if line.strip()]

    def prepare_value(self, value) -> str:
        """A saved list (a draft being edited) as its lines."""
        if isinstance(value, list):
            return "\n".join(str(line) for line in value)
        return super().prepare_value(value)


class RulesFormField(forms.CharField):
    """Extraction rules as JSON text in a textarea (the page's rule editor writes it); a list in
    cleaned_data. What each rule may hold is crawl_clean's to check."""

    widget = forms.Textarea(attrs={"rows": 4, "spellcheck": "false"})

    def to_python(self, value) -> list:
        text = (super().to_python(value) or "").strip()
        if not text:
            return []
        try:
            rules = json.loads(text)
        except ValueError as exc:
            raise ValidationError(f"The rules are not valid JSON: {exc}.") from None
        if not isinstance(rules, list):
            raise ValidationError("The rules are a JSON list of objects, one per field.")
        return rules

    def prepare_value(self, value) -> str:
        if isinstance(value, list):
            return json.dumps(value, indent=1, ensure_ascii=False) if value else ""
        return super().prepare_value(value)


class ChannelsBooleanSelect(forms.NullBooleanSelect):
    """Yes, no, or left empty: the channel's (a crawl option the channel has a default for)."""

    def __init__(self, attrs=None) -> None:
        super().__init__(attrs)
        self.choices = [("unknown", "The channel's"), ("true", "Yes"), ("false", "No")]


KB, MB = 1024, 1024 * 1024
SIZE_UNITS = {"": 1, "b": 1, "bytes": 1, "kb": KB, "k": KB, "kib": KB, "mb": MB, "m": MB, "mib": MB}
SIZE = re.compile(r"^\s*([0-9][0-9_,]*(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$")


def size_text(size: int) -> str:
    """Bytes as a person writes them: "5 MB", "512 KB", or "1500 bytes"."""
    for unit, factor in (("MB", MB), ("KB", KB)):
        if size >= factor and size % factor == 0:
            return f"{size // factor} {unit}"
    return f"{size} bytes"


class SizeFormField(forms.CharField):
    """A size in bytes, typed with its unit: "5 MB", "512 KB", "2.5 MB" or "100000" (bytes);
    KB and MB are 1,024 and 1,048,576 bytes. An int in cleaned_data."""

    def __init__(self, *, min_size: int, max_size: int, **kwargs) -> None:
        self.min_size, self.max_size = min_size, max_size
        super().__init__(**kwargs)

    def to_python(self, value) -> int | None:
        text = (super().to_python(value) or "").strip()
        if not text:
            return None
        found = SIZE.match(text)
        if not found or found.group(2).lower() not in SIZE_UNITS:
            raise ValidationError(
                f"Give a size such as 5 MB, 512 KB or 100000 (bytes); {text[:40]!r} is not one."
            )
        size = float(found.group(1).replace(",", "").replace("_", ""))
        return int(size * SIZE_UNITS[found.group(2).lower()])

    def validate(self, value) -> None:
        super().validate(value)
        if value is not None and value > self.max_size:
            raise ValidationError(f"At most {size_text(self.max_size)} ({self.max_size:,} bytes).")
        if value is not None and value < self.min_size:
            raise ValidationError(f"At least {size_text(self.min_size)} ({self.min_size:,} bytes).")

    def prepare_value(self, value) -> str:
        return size_text(value) if isinstance(value, int) else super().prepare_value(value)


# The unit shown after each number's box on the new-crawl page.
UNITS = {
    "max_depth": "links from a seed",
    "max_pages": "URLs",
    "priority": "from -100 to 100",
    "threads": "fetches at once",
    "slices": "jobs at once",
    "host_delay": "seconds",
    "host_concurrency": "requests at once",
    "timeout": "seconds",
    "max_retries": "retries",
}
HELP = {
    "priority": "Higher means more important, from -100 to 100 (0 is normal). Kept with the "
    "crawl for ordering crawls; workers do not use it yet.",
    "max_bytes": "The largest body kept of one response, e.g. 5 MB or 512 KB (1 KB = 1,024 "
    "bytes); a larger body is cut off there and not parsed. At most 50 MB, and threads x this "
    "at most 256 MB.",
}


def crawl_formfield(model_field: models.Field, **kwargs) -> forms.Field | None:
    """The crawl form's field for a model field: a list of lines is a textarea of one value per
    line, and a choice left empty is the channel's (as Crawl.effective_user_agent_mode says);
    any other field is the model's own form field."""
    if isinstance(model_field, RulesField):
        return RulesFormField(
            required=False, label="Extraction rules", help_text=model_field.help_text
        )
    if isinstance(model_field, LinesField):
        return LinesFormField(
            required=not model_field.blank,
            label=capfirst(model_field.verbose_name),
            help_text=f"One per line. {model_field.help_text}",
        )
    if isinstance(model_field, models.BooleanField) and model_field.null:
        return forms.NullBooleanField(
            widget=ChannelsBooleanSelect,
            required=False,
            label=capfirst(model_field.verbose_name),
            help_text=model_field.help_text,
        )
    if model_field.name == "max_bytes":
        return SizeFormField(
            min_size=KB,
            max_size=MAX_BODY_BYTES,
            label="Max bytes a page",
            initial=model_field.default,
            help_text=HELP["max_bytes"],
            widget=forms.TextInput(attrs={"autocomplete": "off", "spellcheck": "false"}),
        )
    if model_field.choices and model_field.blank:
        return forms.ChoiceField(
            choices=[("", "The channel's"), *model_field.choices],
            required=False,
            label=capfirst(model_field.verbose_name),
            help_text=model_field.help_text,
        )
    field = model_field.formfield(**kwargs)
    if field is not None:
        field.unit = UNITS.get(model_field.name, "")
        field.help_text = HELP.get(model_field.name, field.help_text)
    return field
