"""Settings come from the environment; a bad value stops start-up naming the variable."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHOW = (
    "import django, os; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'crawlhub.settings');"
    "django.setup(); from django.conf import settings as s;"
    "print(s.SECRET_KEY, s.DATABASES['default']['ENGINE'], s.REDIS_URL, s.DEBUG)"
)


def load_settings(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL")}
    clean.update({"CRAWLHUB_DATA_DIR": str(tmp_path / "data"), **env})
    return subprocess.run(
        [sys.executable, "-c", SHOW], cwd=ROOT, env=clean, capture_output=True, text=True
    )


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("DEBUG", "maybe", "DEBUG must be a boolean"),
        ("REDIS_URL", "localhost:6379", "REDIS_URL must start with redis://"),
        ("DATABASE_URL", "mysqlx://nowhere/db", "DATABASE_URL"),
        ("SECRET_KEY", "short", "SECRET_KEY must be at least 32 characters"),
        ("SECURE_HSTS_SECONDS", "a year", "SECURE_HSTS_SECONDS must be a whole number"),
    ],
)
def test_bad_value_stops_startup_naming_the_variable(tmp_path, variable, value, expected):
    result = load_settings(tmp_path, **{variable: value})
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert expected in result.stderr


def test_data_dir_that_is_a_file_is_refused(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    result = load_settings(tmp_path, CRAWLHUB_DATA_DIR=str(blocker))
    assert result.returncode != 0
    assert "CRAWLHUB_DATA_DIR must be a directory" in result.stderr


def test_defaults_are_sqlite_and_the_embedded_redis(tmp_path):
    result = load_settings(tmp_path)
    assert result.returncode == 0, result.stderr
    _, engine, redis_url, debug = result.stdout.split()
    assert engine == "django.db.backends.sqlite3"
    assert redis_url == f"unix://{tmp_path / 'data' / 'redis' / 'redis.sock'}"
    assert debug == "False"


def test_secret_key_is_generated_once_and_kept_private(tmp_path):
    first = load_settings(tmp_path).stdout.split()[0]
    second = load_settings(tmp_path).stdout.split()[0]
    assert len(first) >= 50
    assert first == second
    key_file = tmp_path / "data" / "secret_key"
    assert key_file.stat().st_mode & 0o777 == 0o600


def test_secret_key_from_the_environment_wins(tmp_path):
    key = "k" * 40
    assert load_settings(tmp_path, SECRET_KEY=key).stdout.split()[0] == key
    assert not (tmp_path / "data" / "secret_key").exists()
