"""The API's serializer bases: every moment as crawlhub.dates.machine() writes it (ISO 8601 in
UTC with the offset and microseconds, as the exports), whatever the server's TIME_ZONE; DRF's
own field writes the server's zone, and "Z" for UTC. Serializers of the API derive from
ModelSerializer here and declare DateTimeField from here."""

from __future__ import annotations

from datetime import datetime

from django.db import models
from rest_framework import serializers

from crawlhub.dates import machine


class DateTimeField(serializers.DateTimeField):
    """Read as DRF reads any ISO 8601 moment; written as machine() writes it."""

    def to_representation(self, value: datetime | str | None) -> str | None:
        if isinstance(value, str):
            value = datetime.fromisoformat(value) if value else None
        return machine(value)


class ModelSerializer(serializers.ModelSerializer):
    """DRF's ModelSerializer with every model DateTimeField written by machine()."""

    serializer_field_mapping = {
        **serializers.ModelSerializer.serializer_field_mapping,
        models.DateTimeField: DateTimeField,
    }
