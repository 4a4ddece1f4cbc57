"""The API's documentation page: Swagger UI from drf-spectacular-sidecar's files, served here (no
CDN), behind the login, with no inline script, under the dashboard's Content-Security-Policy.
The browser test (tests/dashboard/test_browser_api_docs.py) checks that it runs there."""

from __future__ import annotations

import lxml.html
import pytest

pytestmark = pytest.mark.django_db

SIDECAR = "/static/drf_spectacular_sidecar/swagger-ui-dist/"


def test_the_docs_page_loads_swagger_ui_from_this_site_only(user_client):
    response = user_client.get("/api/docs/")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/html")
    html = lxml.html.fromstring(response.content)
    scripts = [s.get("src") for s in html.iter("script")]
    assert all(scripts), "no inline script: the policy refuses them"
    assert SIDECAR + "swagger-ui-bundle.js" in scripts
    assert "/static/js/api_docs.js" in scripts
    styles = [link.get("href") for link in html.cssselect("link[rel=stylesheet]")]
    assert SIDECAR + "swagger-ui.css" in styles
    assert not html.cssselect("[style]") and not list(html.iter("style")), "no inline style"
    for url in scripts + styles:
        assert url.startswith("/static/"), f"{url} is not one of this site's files"
        assert user_client.get(url).status_code == 200, url
    # Where the schema is, to read (JSON) or to download (YAML), and how to get a token.
    [mount] = html.cssselect("#swagger-ui")
    assert mount.get("data-schema-url") == "/api/schema/?format=json"
    links = {a.get("href") for a in html.cssselect("main a")}
    assert {"/api/schema/?format=json", "/api/schema/", "/account/tokens/"} <= links
    policy = response["Content-Security-Policy"]
    assert "script-src 'self';" in policy and "style-src 'self';" in policy
    # Swagger UI's icons are data: images in its stylesheet: there, and only there.
    assert "img-src 'self' data:" in policy
    assert "img-src" not in user_client.get("/account/tokens/")["Content-Security-Policy"]


def test_the_nav_and_the_tokens_page_lead_to_the_docs(user_client):
    crawls = lxml.html.fromstring(user_client.get("/").content)
    assert "/api/docs/" in crawls.xpath('//nav[@aria-label="Main"]//a/@href')
    tokens = lxml.html.fromstring(user_client.get("/account/tokens/").content)
    assert "/api/docs/" in tokens.xpath("//main//a/@href")


def test_the_docs_page_needs_a_login(client):
    response = client.get("/api/docs/")
    assert response.status_code == 302
    assert response["Location"].startswith("/login/")
