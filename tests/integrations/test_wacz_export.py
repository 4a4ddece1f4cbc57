"""WACZ export of a crawl that keeps bodies: a package made with the `wacz` package, which its own
validation accepts, holding the crawl's WARC, an index a replay tool reads, and a page list."""

from __future__ import annotations

import gzip
import io
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from django.core.management import call_command

from crawlhub import tokens
from crawls import services
from tests.integrations.test_warc_export import ArchivedSite, read_warc
from tests.support.crawling import drive

pytestmark = pytest.mark.django_db


@pytest.fixture
def crawl(user, make_site):
    site = make_site(ArchivedSite())
    crawl = services.crawl_create(
        user=user,
        name="wacz",
        seeds=[site.url + "/"],
        keep_bodies=True,
        obey_robots=False,
        max_retries=0,
    )
    services.crawl_start(crawl=crawl, user=user)
    return drive(crawl)


def wacz_validate(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "wacz", "validate", "--file", str(path)],
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
def test_the_wacz_download_validates_and_holds_the_crawl(crawl, user_client, tmp_path):
    response = user_client.get(f"/crawls/{crawl.pk}/export.wacz")
    assert response.status_code == 200
    assert response["Content-Type"] == "application/wacz"
    assert response["Content-Disposition"] == f'attachment; filename="crawl-{crawl.pk}.wacz"'
    assert response["X-Content-Type-Options"] == "nosniff"
    path = tmp_path / "crawl.wacz"
    path.write_bytes(b"".join(response.streaming_content))
    checked = wacz_validate(path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "Validation succeeded, the passed WACZ is valid" in checked.stdout

    package = zipfile.ZipFile(path)
    names = set(package.namelist())
    assert {
        f"archive/crawl-{crawl.pk}.warc.gz",
        "indexes/index.cdx.gz",
        "indexes/index.idx",
        "pages/pages.jsonl",
        "datapackage.json",
        "datapackage-digest.json",
    } <= names
    records = read_warc(package.read(f"archive/crawl-{crawl.pk}.warc.gz"))
    assert {r["type"] for r in records} == {"warcinfo", "request", "response", "revisit"}
    # The index a replay tool looks a URL up in: the redirect is there, with its status.
    index = gzip.decompress(package.read("indexes/index.cdx.gz")).decode()
    moved = [line for line in index.splitlines() if "/moved" in line and '"status": "301"' in line]
    assert moved, index
    pages = [json.loads(line) for line in package.read("pages/pages.jsonl").decode().splitlines()]
    assert pages[0]["format"] == "json-pages-1.0"
    seed = crawl.seeds[0]
    assert {"url": seed, "title": "Home"}.items() <= next(
        p for p in pages[1:] if p["url"] == seed
    ).items()
    listed = {p["url"] for p in pages[1:]}
    assert seed + "moved" not in listed and seed + "logo.bin" not in listed, "HTML pages only"
    about = json.loads(package.read("datapackage.json"))
    assert about["title"] == f"crawl {crawl.pk}: wacz"


@pytest.mark.slow
def test_the_cli_and_the_api_write_a_wacz_too(crawl, user, client, tmp_path):
    target = tmp_path / "cli.wacz"
    call_command(
        "crawl",
        "export",
        str(crawl.pk),
        "--format",
        "wacz",
        "--output",
        str(target),
        stdout=io.StringIO(),
    )
    assert wacz_validate(target).returncode == 0
    _, raw = tokens.token_create(user=user, name="t")
    api = client.get(
        f"/api/crawls/{crawl.pk}/export/?format=wacz", HTTP_AUTHORIZATION=f"Bearer {raw}"
    )
    assert api.status_code == 200 and api["Content-Type"] == "application/wacz"
    assert zipfile.ZipFile(io.BytesIO(b"".join(api.streaming_content))).testzip() is None


def test_a_crawl_without_bodies_has_no_wacz_and_says_why(user, user_client):
    crawl = services.crawl_create(user=user, name="bare", seeds=["http://a.test/"])
    services.crawl_start(crawl=crawl, user=user)
    page = user_client.get(f"/crawls/{crawl.pk}/export.wacz")
    assert page.status_code == 409
    assert "nothing to put in a WACZ file" in page.content.decode()
