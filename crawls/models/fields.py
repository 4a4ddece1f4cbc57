"""The two JSON fields the doors read as typed text: a list of lines and extraction rules."""

from __future__ import annotations

from django.db import models


class LinesField(models.JSONField):
    """A list of strings, one value per line where a person types it (a textarea, a repeated
    flag, a JSON list). The doors look for this class to parse it; to the database and to
    migrations it is a JSONField (see deconstruct)."""

    def deconstruct(self) -> tuple:
        # Nothing about it is stored differently: migrations keep seeing a JSONField, so that
        # marking a field as lines never rebuilds a table.
        name, _path, args, kwargs = super().deconstruct()
        return name, "django.db.models.JSONField", args, kwargs


class RulesField(models.JSONField):
    """Extraction rules: a JSON list of objects (crawls/engine/extraction.py says what each
    holds). The doors look for this class: a JSON text in forms and on the command line, a
    list in the API. A JSONField to the database and to migrations."""

    def deconstruct(self) -> tuple:
        name, _path, args, kwargs = super().deconstruct()
        return name, "django.db.models.JSONField", args, kwargs
