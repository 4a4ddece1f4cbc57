"""A crawl's options are defined once, as the fields of crawls.models.CrawlOptions. The crawl
form, the CLI's `crawl create` and the API take every one from there, with its type: an option
that a door misses, or reads as another type, fails here."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.core.management import CommandError
from django.db import models
from rest_framework import serializers

from crawls.admin import CrawlAdminForm
from crawls.api.crawls import CrawlCreateSerializer, CrawlSerializer
from crawls.management.commands.crawl import Command
from crawls.models import CrawlOptions, LinesField, RulesField
from crawls.views import forms as forms_module
from crawls.views.forms import CrawlForm

pytestmark = pytest.mark.django_db

OPTIONS = [field.name for field in CrawlOptions._meta.fields]


def kind(field: models.Field) -> str:
    """What a person gives for an option, whichever door: the model field's class says."""
    if isinstance(field, LinesField):
        return "lines"
    if isinstance(field, RulesField):
        return "rules"
    if field.choices:
        return "choice"
    for model_class, name in (
        (models.BooleanField, "bool"),
        (models.IntegerField, "int"),
        (models.FloatField, "float"),
        (models.CharField, "text"),
    ):
        if isinstance(field, model_class):
            return name
    raise AssertionError(f"{field.name}: no door is known to read a {type(field).__name__}")


def samples(name: str) -> list[Any]:
    """Values every door must read back exactly, with the same Python type."""
    field = CrawlOptions._meta.get_field(name)
    return {
        "lines": [["a.example", "b.example"]],
        "rules": [[{"name": "title", "kind": "css", "expr": "h1", "many": True}]],
        "choice": [value for value, _label in field.flatchoices],
        "bool": [True, False],
        "int": [7],
        "float": [2.5],
        "text": ["crawler/1.0"],
    }[kind(field)]


def as_json(value: Any) -> str | None:
    """Rules (a list of objects) are JSON text in the form and on the command line."""
    return json.dumps(value) if value and isinstance(value[0], dict) else None


def through_form(name: str, value: Any) -> Any:
    if isinstance(value, list):
        raw = as_json(value) or "\n".join(value)
    elif isinstance(value, bool) and CrawlOptions._meta.get_field(name).null:
        raw = "true" if value else "false"  # yes / no / the channel's, in a select
    elif isinstance(value, bool):
        raw = "on" if value else None  # an unticked checkbox is not sent
    else:
        raw = str(value)
    # The type only: limits (max_pages >= 1, ...) are crawl_clean's to check, for every door.
    return CrawlForm().fields[name].to_python(raw)


def through_cli(name: str, value: Any) -> Any:
    flag = "--" + name.replace("_", "-")
    if isinstance(value, list) and as_json(value):
        args = [flag, as_json(value)]
    elif isinstance(value, list):
        args = [arg for item in value for arg in (flag, item)]
    elif isinstance(value, bool):
        args = [flag] if value else ["--no-" + flag[2:]]
    else:
        args = [flag, str(value)]
    parser = Command().create_parser("manage.py", "crawl")
    parsed = parser.parse_args(["create", "--name", "n", "--seed", "http://e.test/", *args])
    return getattr(parsed, name)


def through_api(name: str, value: Any) -> Any:
    return CrawlCreateSerializer().fields[name].to_internal_value(value)


DOORS = {"form": through_form, "cli": through_cli, "api": through_api}


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize("name", OPTIONS)
def test_every_option_is_read_by_every_door_as_its_model_type(door, name):
    for value in samples(name):
        read = DOORS[door](name, value)
        assert (type(read), read) == (type(value), value), f"{door} reads {name} {value!r}"


# A value of another type, that a door reading the option's type refuses; a door is left out
# where it cannot be given one (any text is a line, a yes/no flag is there or not).
WRONG = {
    "lines": {"api": "a.example"},
    "rules": {"form": "[{'name': 'x'}]", "cli": "{not json", "api": "h1"},
    "choice": {"form": "nosuch", "cli": "nosuch", "api": "nosuch"},
    "bool": {"api": "maybe"},
    "int": {"form": "2.5", "cli": "2.5", "api": "2.5"},
    "float": {"form": "x", "cli": "x", "api": "x"},
    "text": {"api": {"a": 1}},
}
REFUSED = {
    "form": (ValidationError, lambda name, raw: CrawlForm().fields[name].clean(raw)),
    "cli": (CommandError, through_cli),
    "api": (serializers.ValidationError, through_api),
}
WRONG_VALUES = [
    (door, name, wrong)
    for name in OPTIONS
    for door, wrong in WRONG[kind(CrawlOptions._meta.get_field(name))].items()
]


@pytest.mark.parametrize(("door", "name", "wrong"), WRONG_VALUES)
def test_every_door_refuses_a_value_of_another_type(door, name, wrong):
    error, read = REFUSED[door]
    with pytest.raises(error):
        read(name, wrong)


def test_every_option_is_on_the_page_in_the_admin_and_in_the_api_answers(user_client):
    page = user_client.get("/crawls/new/").content.decode()
    read = CrawlSerializer().fields
    create = CrawlCreateSerializer().fields
    for name in OPTIONS:
        assert page.count(f'name="{name}"') == 1, f"the new-crawl page has no input for {name}"
        assert name in CrawlAdminForm.base_fields, name
        assert type(read[name]) is type(create[name]) and read[name].read_only, name


def test_an_option_the_page_does_not_lay_out_is_offered_under_more_options(monkeypatch):
    """The page shows form.more_options() in a section of its own (each input once on the
    real page is checked above), so an option the page does not name still reaches users."""
    assert [field.name for field in CrawlForm().more_options()] == []
    monkeypatch.setattr(forms_module, "LAID_OUT", forms_module.LAID_OUT - {"priority"})
    assert [field.name for field in CrawlForm().more_options()] == ["priority"]
