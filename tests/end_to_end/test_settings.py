"""Settings come from the environment; a bad value stops start-up naming the variable."""

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis.connection
from django.conf import settings
from django.db import connection

from crawlhub.redis import redis_config
from tests.support import processes
from tests.support.settings_process import ForkingRunner

ROOT = Path(__file__).resolve().parents[2]
SHOW = (
    "import django, os; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'crawlhub.settings');"
    "django.setup(); from django.conf import settings as s;"
    "print(s.SECRET_KEY, s.DATABASES['default']['ENGINE'], s.REDIS_URL, s.DEBUG)"
)


@pytest.fixture(scope="module")
def forking_runner() -> Iterator[ForkingRunner]:
    with ForkingRunner(cwd=ROOT) as runner:
        yield runner


@pytest.fixture
def load_settings(forking_runner) -> Callable[..., subprocess.CompletedProcess]:
    """The settings read by a new process (forked: tests.support.settings_process) given the
    environment of this one but for env, with a data dir of the test's own."""

    def load(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
        clean = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL")}
        clean.update({"CRAWLHUB_DATA_DIR": str(tmp_path / "data"), **env})
        return forking_runner.run(SHOW, env=clean)

    return load


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("DEBUG", "maybe", "DEBUG must be a boolean"),
        ("REDIS_URL", "localhost:6379", "REDIS_URL must start with redis://"),
        ("DATABASE_URL", "mysqlx://nowhere/db", "DATABASE_URL"),
        ("SECRET_KEY", "short", "SECRET_KEY must be at least 32 characters"),
        ("SECURE_HSTS_SECONDS", "a year", "SECURE_HSTS_SECONDS must be a whole number"),
        ("LOG_LEVEL", "bogus", "LOG_LEVEL must be one of DEBUG, INFO, WARNING"),
        ("TIME_ZONE", "Mars/Base", "TIME_ZONE must be an IANA time zone name"),
        ("TIME_ZONE", "../etc/passwd", "TIME_ZONE must be an IANA time zone name"),
        ("ALLOWED_HOSTS", "", "ALLOWED_HOSTS must name at least one host"),
        ("ALLOWED_HOSTS", " , ", "ALLOWED_HOSTS must name at least one host"),
        ("ALLOWED_HOSTS", "https://crawl.example.com", "ALLOWED_HOSTS must be host names"),
        ("ALLOWED_HOSTS", "localhost:8000", "ALLOWED_HOSTS must be host names"),
    ],
)
def test_bad_value_stops_startup_naming_the_variable(
    load_settings, tmp_path, variable, value, expected
):
    result = load_settings(tmp_path, **{variable: value})
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert expected in result.stderr


@pytest.mark.parametrize("command", [["check"], ["up", "--workers", "0"], ["rqworker", "crawls"]])
@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("SECRET_KEY", "short", "SECRET_KEY must be at least 32 characters long, got 5"),
        ("DEBUG", "maybe", "DEBUG must be a boolean"),
    ],
)
def test_manage_py_reports_a_bad_value_in_one_line_without_a_traceback(
    tmp_path, command, variable, value, expected
):
    clean = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL")}
    clean.update({"CRAWLHUB_DATA_DIR": str(tmp_path / "data"), variable: value})
    result = subprocess.run(
        [sys.executable, "manage.py", *command],
        cwd=ROOT,
        env=clean,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    [line] = result.stderr.splitlines()  # one line: no traceback
    assert line.startswith("crawlhub cannot start: ") and expected in line
    if variable == "SECRET_KEY":
        assert value not in line  # its length is told, not the secret itself


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        (
            {"REDIS_URL": "rediss://h:6380/0", "REDIS_CA_FILE": "/nowhere/ca.pem"},
            "REDIS_CA_FILE=/nowhere/ca.pem: no such file on this machine",
        ),
        (
            {"REDIS_URL": "redis://h:6379/0", "REDIS_CA_FILE": __file__},
            "REDIS_CA_FILE is set but REDIS_URL is not a TLS address",
        ),
        ({"REDIS_CA_FILE": __file__}, "REDIS_CA_FILE is set but REDIS_URL is not"),
        (
            {"REDIS_URL": "rediss://h:6380/0", "REDIS_CERT_FILE": __file__},
            "REDIS_CERT_FILE and REDIS_KEY_FILE go together",
        ),
        ({"REDIS_URL": "h:6379?password=secret"}, "REDIS_URL must start with redis://"),
    ],
)
def test_redis_tls_settings_that_cannot_work_stop_startup(load_settings, tmp_path, env, expected):
    result = load_settings(tmp_path, **env)
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr and expected in result.stderr


@pytest.mark.slow
def test_the_redis_tls_files_go_into_the_url_every_client_is_given(load_settings, tmp_path):
    ca, cert, key = (tmp_path / f"{name}.pem" for name in ("ca", "cert", "key"))
    for path in (ca, cert, key):
        path.write_text("-")
    env = {"REDIS_CA_FILE": str(ca), "REDIS_CERT_FILE": str(cert), "REDIS_KEY_FILE": str(key)}
    result = load_settings(tmp_path, REDIS_URL="rediss://u:p%40ss@h:6380/2", **env)
    assert result.returncode == 0, result.stderr
    url = result.stdout.split()[2]
    assert url == (
        f"rediss://u:p%40ss@h:6380/2?ssl_ca_certs={ca}&ssl_certfile={cert}&ssl_keyfile={key}"
    )
    parsed = redis.connection.parse_url(url)
    assert parsed["ssl_ca_certs"] == str(ca) and parsed["password"] == "p@ss"
    # A child process given the finished URL, and the same files, gets the same URL.
    assert redis_config.client_url(url, env) == url


def test_a_redis_url_is_shown_with_its_password_masked():
    assert redis_config.masked("rediss://u:p%40ss@h:6380/0?x=1") == "rediss://u:****@h:6380/0?x=1"
    assert redis_config.masked("redis://:secret@h/0") == "redis://:****@h/0"
    assert redis_config.masked("redis://h:6379/0") == "redis://h:6379/0"
    assert redis_config.where("rediss://u:p@10.0.0.5:6380/3") == "10.0.0.5:6380 (TLS, user u, db 3)"
    assert redis_config.where("unix:///run/r.sock") == "the unix socket /run/r.sock"


def test_an_empty_data_dir_is_the_default_as_run_reads_it(forking_runner):
    """`./run` takes an empty CRAWLHUB_DATA_DIR for unset (var/); so do the settings (an empty
    one was the working directory: STATIC_ROOT then fell inside STATICFILES_DIRS and `up`
    stopped at Django's checks)."""
    show = SHOW.replace(
        "print(s.SECRET_KEY, s.DATABASES['default']['ENGINE'], s.REDIS_URL, s.DEBUG)",
        "print(s.DATA_DIR)",
    )
    clean = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL")}
    unset = {k: v for k, v in clean.items() if k != "CRAWLHUB_DATA_DIR"}
    empty = forking_runner.run(show, env={**unset, "CRAWLHUB_DATA_DIR": ""})
    default = forking_runner.run(show, env=unset)
    assert empty.returncode == default.returncode == 0, empty.stderr[-500:]
    assert empty.stdout.strip() == default.stdout.strip() == str(ROOT / "var")


def test_data_dir_that_is_a_file_is_refused(load_settings, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    result = load_settings(tmp_path, CRAWLHUB_DATA_DIR=str(blocker))
    assert result.returncode != 0
    assert "CRAWLHUB_DATA_DIR must be a directory" in result.stderr


@pytest.mark.slow
def test_defaults_are_sqlite_and_the_embedded_redis(load_settings, tmp_path):
    result = load_settings(tmp_path)
    assert result.returncode == 0, result.stderr
    _, engine, redis_url, debug = result.stdout.split()
    assert engine == "django.db.backends.sqlite3"
    assert redis_url == f"unix://{tmp_path / 'data' / 'redis' / 'redis.sock'}"
    assert debug == "False"


@pytest.mark.slow
def test_secret_key_is_generated_once_and_kept_private(load_settings, tmp_path):
    first = load_settings(tmp_path).stdout.split()[0]
    second = load_settings(tmp_path).stdout.split()[0]
    assert len(first) >= 50
    assert first == second
    key_file = tmp_path / "data" / "secret_key"
    assert key_file.stat().st_mode & 0o777 == 0o600


@pytest.mark.slow
def test_secret_key_from_the_environment_wins(load_settings, tmp_path):
    key = "k" * 40
    assert load_settings(tmp_path, SECRET_KEY=key).stdout.split()[0] == key
    assert not (tmp_path / "data" / "secret_key").exists()


@pytest.mark.slow
def test_good_values_are_accepted(load_settings, tmp_path):
    result = load_settings(
        tmp_path,
        LOG_LEVEL="debug",
        TIME_ZONE="Europe/Paris",
        ALLOWED_HOSTS="crawl.example.com, .example.org,[::1],*",
    )
    assert result.returncode == 0, result.stderr


# Each process imports everything the settings need, spins until a shared moment (a sleep
# would wake the processes too far apart), then reads the settings: the key is created by
# several processes within microseconds of each other.
RACE = (
    "import sys, time; import dj_database_url, django.conf, crawlhub.processes.launcher\n"
    "start = float(sys.argv[1])\n"
    "while time.time() < start: pass\n"
    "from crawlhub import settings; print(settings.SECRET_KEY)"
)


@pytest.mark.slow
def test_processes_starting_at_once_share_one_secret_key(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "SECRET_KEY")}
    for attempt in range(1, 4):  # a race: a few rounds make a lost one likely to show
        data = tmp_path / f"data{attempt}"
        env["CRAWLHUB_DATA_DIR"] = str(data)
        start = time.time() + 1.5
        procs = [
            processes.spawn(
                [sys.executable, "-c", RACE, str(start)],
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(8)
        ]
        results = [proc.communicate(timeout=60) for proc in procs]
        for proc, (_, err) in zip(procs, results, strict=True):
            assert proc.returncode == 0, f"round {attempt}: {err}"
        keys = {out.strip() for out, _ in results}
        assert len(keys) == 1, f"round {attempt}: the processes got different keys: {keys}"
        assert len(keys.pop()) >= 50
        assert (data / "secret_key").stat().st_mode & 0o777 == 0o600
        assert [p.name for p in data.iterdir() if p.name.startswith(".secret_key")] == []


def test_an_empty_secret_key_file_is_refused_not_used(load_settings, tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "secret_key").write_text("")
    result = load_settings(tmp_path)
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert "secret_key holds no usable SECRET_KEY" in result.stderr


@pytest.mark.django_db
def test_sqlite_runs_in_wal_mode_with_the_busy_timeout():
    if connection.vendor != "sqlite":
        pytest.skip("WAL and the busy timeout are SQLite's; DATABASE_URL names another database")
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA journal_mode")
        (journal_mode,) = cursor.fetchone()
        cursor.execute("PRAGMA busy_timeout")
        (busy_timeout_ms,) = cursor.fetchone()
    assert journal_mode == "wal"
    assert busy_timeout_ms == settings.DATABASES["default"]["OPTIONS"]["timeout"] * 1000
    assert busy_timeout_ms >= 10_000  # several worker processes write at once
