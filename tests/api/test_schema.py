"""The OpenAPI schema: served to signed-in users, valid OpenAPI 3, every endpoint in it."""

from __future__ import annotations

import re

import pytest
from django.urls import URLPattern, URLResolver, get_resolver
from drf_spectacular.validation import validate_schema

pytestmark = pytest.mark.django_db

ENDPOINTS = {
    "/api/crawls/": {"get", "post"},
    "/api/crawls/{id}/": {"get", "delete"},
    "/api/crawls/{id}/start/": {"post"},
    "/api/crawls/{id}/pause/": {"post"},
    "/api/crawls/{id}/resume/": {"post"},
    "/api/crawls/{id}/cancel/": {"post"},
    "/api/crawls/{id}/seeds/": {"post"},
    "/api/crawls/{id}/credentials/": {"post"},
    "/api/crawls/{id}/retry/": {"post"},
    "/api/crawls/{id}/change/": {"post"},
    "/api/crawls/{id}/queue/": {"get"},
    "/api/crawls/{id}/hosts/": {"get"},
    "/api/crawls/{id}/hosts/hold/": {"post"},
    "/api/crawls/{id}/hosts/release/": {"post"},
    "/api/crawls/{id}/hosts/drop/": {"post"},
    "/api/crawls/{id}/pages/": {"get"},
    "/api/crawls/{id}/pages/{page_pk}/": {"get"},
    "/api/crawls/{id}/failures/": {"get"},
    "/api/crawls/{id}/log/": {"get"},
    "/api/crawls/{id}/export/": {"get"},
    "/api/channels/": {"get", "post"},
    "/api/channels/{slug}/": {"get", "put", "patch"},
    "/api/schedules/": {"get", "post"},
    "/api/schedules/{id}/": {"get", "put", "patch", "delete"},
    "/api/webhooks/": {"get", "post"},
    "/api/webhooks/{id}/": {"get", "put", "patch", "delete"},
    "/api/alert-rules/": {"get", "post"},
    "/api/alert-rules/{id}/": {"get", "put", "patch", "delete"},
    "/api/alerts/": {"get"},
    "/api/alerts/{id}/": {"get"},
    "/api/proxies/": {"get"},
    "/api/proxies/{id}/": {"get"},
    "/api/proxies/import/": {"post"},
    "/api/proxies/remove/": {"post"},
    "/api/proxies/validate/": {"post"},
    "/api/proxies/jobs/": {"get"},
    "/api/proxies/jobs/{id}/": {"get"},
    "/api/pool/health/": {"get"},
    "/api/tokens/": {"get", "post"},
    "/api/tokens/{id}/": {"delete"},
}


@pytest.fixture
def schema(user_client) -> dict:
    response = user_client.get("/api/schema/?format=json")
    assert response.status_code == 200
    return response.json()


def test_the_schema_reads_in_a_browser_as_json_and_downloads_as_yaml(user_client):
    """?format=json is JSON a browser shows (the docs page links to it); the default is the
    YAML file a client expects."""
    response = user_client.get("/api/schema/?format=json", HTTP_ACCEPT="text/html,*/*")
    assert response["Content-Type"].startswith("application/json")
    assert response.json()["info"]["title"] == "crawlhub API"
    yaml = user_client.get("/api/schema/")
    assert yaml["Content-Type"].startswith("application/vnd.oai.openapi")
    assert yaml.content.startswith(b"openapi: 3.")


def test_the_schema_needs_a_login(client):
    response = client.get("/api/schema/")
    assert response.status_code == 401
    assert response.json()["detail"]


def test_the_schema_is_valid_openapi_3(schema):
    assert schema["openapi"].startswith("3.")
    validate_schema(schema)


def test_the_schema_has_every_endpoint_and_method(schema):
    paths = {path: set(ops) - {"parameters"} for path, ops in schema["paths"].items()}
    assert paths == ENDPOINTS


def test_the_schema_has_every_api_route_django_knows(schema):
    """A route added to the API without a place in the schema fails here."""
    routes = set()

    def walk(patterns, prefix: str) -> None:
        for entry in patterns:
            route = prefix + str(entry.pattern)
            if isinstance(entry, URLResolver):
                walk(entry.url_patterns, route)
            elif isinstance(entry, URLPattern) and route.startswith("api/"):
                routes.add(route)

    walk(get_resolver().url_patterns, "")
    as_paths = set()
    for route in routes:
        if "<drf_format_suffix" in route or "(?P<format>" in route or route == "api/^$":
            continue  # DRF's .json suffix twins and the browsable root
        path = "/" + re.sub(r"\(\?P<(\w+)>[^)]*\)|<(?:\w+:)?(\w+)>", r"{\1\2}", route)
        as_paths.add(path.replace("^", "").replace("$", "").replace("{pk}", "{id}"))
    # The schema itself, the browsable root, and the documentation page (HTML, not the API).
    assert as_paths - {"/api/schema/", "/api/", "/api/docs/"} == set(ENDPOINTS)


def test_the_schema_says_how_to_authenticate(schema):
    schemes = schema["components"]["securitySchemes"]
    assert schemes["bearerAuth"] == {
        "type": "http",
        "scheme": "bearer",
        "description": "A token from /account/tokens/",
    }
    assert {"bearerAuth": []} in schema["paths"]["/api/crawls/"]["get"]["security"]


def test_no_operation_is_described_by_a_mixin_s_docstring(schema):
    """An operation without its own description takes its view's: never a helper class's."""
    described = [
        (method, path)
        for path, ops in schema["paths"].items()
        for method, op in ops.items()
        if isinstance(op, dict) and "errors are still JSON" in op.get("description", "")
    ]
    assert described == []


def test_export_is_described_as_files(schema):
    content = schema["paths"]["/api/crawls/{id}/export/"]["get"]["responses"]["200"]["content"]
    assert set(content) == {
        "application/x-ndjson",
        "text/csv",
        "application/warc",
        "application/wacz",
    }


def test_no_webhook_secret_is_described_outside_the_creation_answer(schema):
    components = schema["components"]["schemas"]
    with_secret = {
        name for name, body in components.items() if "secret" in body.get("properties", {})
    }
    assert with_secret == {"NewWebhook"}
    created = schema["paths"]["/api/webhooks/"]["post"]["responses"]["201"]
    assert created["content"]["application/json"]["schema"]["$ref"].endswith("/NewWebhook")
