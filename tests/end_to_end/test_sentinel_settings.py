"""The Sentinel settings (REDIS_SENTINELS, REDIS_SENTINEL_SERVICE, the passwords) as every client
is given them: RQ's queues, the channel layer, the URL child processes inherit; and the
combinations that cannot work, refused at start-up naming the variable. The failover itself,
on real servers and sentinels: test_sentinel_failover.py."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from crawlhub.redis import redis_config

ROOT = Path(__file__).resolve().parents[2]
SHOW = (
    "import django, json, os; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'crawlhub.settings');"
    "django.setup(); from django.conf import settings as s;"
    "print(json.dumps({'url': s.REDIS_URL, 'embedded': s.REDIS_EMBEDDED,"
    " 'rq': s.RQ_QUEUES['crawls'], 'channels': s.CHANNEL_LAYERS['default']['CONFIG']['hosts']}))"
)
SENTINELS = {
    "REDIS_SENTINELS": "10.0.0.5:26379,10.0.0.6:26379,[fd00::7]:26380",
    "REDIS_SENTINEL_SERVICE": "crawlhub",
    "REDIS_SENTINEL_PASSWORD": "s3nt&nel",
}


def load_settings(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("REDIS_")}
    clean.update({"CRAWLHUB_DATA_DIR": str(tmp_path / "data"), **env})
    return subprocess.run(
        [sys.executable, "-c", SHOW], cwd=ROOT, env=clean, capture_output=True, text=True
    )


@pytest.mark.slow
def test_the_sentinels_reach_rq_the_channel_layer_and_child_processes(tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_text("-")
    env = {**SENTINELS, "REDIS_URL": "rediss://crawler:p%40ss@/2", "REDIS_CA_FILE": str(ca)}
    result = load_settings(tmp_path, **env)
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    assert not shown["embedded"]
    sentinels = [["10.0.0.5", 26379], ["10.0.0.6", 26379], ["fd00::7", 26380]]
    tls = {"ssl": True, "ssl_ca_certs": str(ca)}
    assert shown["rq"] == {
        "SENTINELS": sentinels,
        "MASTER_NAME": "crawlhub",
        "DB": 2,
        "USERNAME": "crawler",
        "PASSWORD": "p@ss",
        "SENTINEL_KWARGS": {"username": None, "password": "s3nt&nel", **tls},
        "CONNECTION_KWARGS": tls,
        "DEFAULT_TIMEOUT": 900,
    }
    [host] = shown["channels"]
    assert host["sentinels"] == sentinels and host["master_name"] == "crawlhub"
    assert host["sentinel_kwargs"]["password"] == "s3nt&nel" and host["password"] == "p@ss"
    assert host["ssl"] is True and host["db"] == 2 and host["socket_timeout"] == 30
    # A child process gets the finished URL (and the same variables): the same settings.
    url = shown["url"]
    assert redis_config.client_url(url, env) == url
    assert redis_config.masked(url) == (
        "rediss://crawler:****@/2?sentinels=10.0.0.5:26379,10.0.0.6:26379,[fd00::7]:26380"
        f"&service=crawlhub&sentinel_password=****&ssl_ca_certs={ca}"
    )
    assert redis_config.where(url) == (
        "the master 'crawlhub' of the sentinels 10.0.0.5:26379, 10.0.0.6:26379, "
        "[fd00::7]:26380 (TLS, user crawler, db 2)"
    )


@pytest.mark.slow
def test_without_redis_url_the_sentinels_master_is_used_without_a_password(tmp_path):
    result = load_settings(tmp_path, REDIS_SENTINELS="10.0.0.5:26379", REDIS_SENTINEL_SERVICE="m")
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    assert shown["url"] == "redis:///0?sentinels=10.0.0.5:26379&service=m"
    assert shown["rq"]["PASSWORD"] is None and shown["rq"]["CONNECTION_KWARGS"] == {}
    assert not shown["embedded"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("env", "expected"),
    [
        (
            {**SENTINELS, "REDIS_URL": "redis://:pw@10.0.0.5:6379/0"},
            "REDIS_SENTINELS is set, and REDIS_URL names a server too (10.0.0.5:6379)",
        ),
        ({**SENTINELS, "REDIS_SENTINEL_SERVICE": ""}, "REDIS_SENTINEL_SERVICE is not"),
        ({**SENTINELS, "REDIS_SENTINELS": "10.0.0.5"}, "'10.0.0.5' is not host:port"),
        ({**SENTINELS, "REDIS_SENTINELS": "10.0.0.5:99999"}, "'10.0.0.5:99999' is not"),
        (
            {"REDIS_URL": "redis://h:6379/0", "REDIS_SENTINEL_PASSWORD": "x"},
            "REDIS_SENTINEL_PASSWORD is set but REDIS_SENTINELS is not",
        ),
        ({"REDIS_SENTINEL_SERVICE": "m"}, "REDIS_SENTINEL_SERVICE is set but REDIS_URL is not"),
    ],
)
def test_sentinel_settings_that_cannot_work_stop_startup(tmp_path, env, expected):
    result = load_settings(tmp_path, **env)
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr and expected in result.stderr
    assert "s3nt&nel" not in result.stderr
