"""crawlhub settings: every value comes from the environment, with defaults that run locally.

A bad value stops start-up with ImproperlyConfigured naming the variable and what was expected.
"""

import contextlib
import os
import secrets
import sys
import tempfile
from datetime import timedelta
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from crawlhub.env import (
    env_bool,
    env_hosts,
    env_int,
    env_list,
    env_log_level,
    env_str,
    env_time_zone,
)
from crawlhub.http import netguard
from crawlhub.processes import launcher
from crawlhub.redis import redis_config

BASE_DIR = Path(__file__).resolve().parent.parent


def _data_dir() -> Path:
    # Empty means unset, as `./run` reads it (${CRAWLHUB_DATA_DIR:-var}).
    chosen = env_str("CRAWLHUB_DATA_DIR", "").strip() or str(BASE_DIR / "var")
    path = Path(chosen).expanduser().resolve()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ImproperlyConfigured(
            f"CRAWLHUB_DATA_DIR must be a directory crawlhub can create and write: {path}: {exc}"
        ) from None
    if not os.access(path, os.W_OK):
        raise ImproperlyConfigured(f"CRAWLHUB_DATA_DIR must be writable: {path}")
    return path


MIN_SECRET_KEY_LENGTH = 32


def _secret_key(data_dir: Path) -> str:
    """SECRET_KEY from the environment, else generated once and kept in the data dir."""
    key = os.environ.get("SECRET_KEY", "")
    if key:
        if len(key) < MIN_SECRET_KEY_LENGTH:
            raise ImproperlyConfigured(
                f"SECRET_KEY must be at least {MIN_SECRET_KEY_LENGTH} characters long, got "
                f"{len(key)} (unset it to have one generated and kept in CRAWLHUB_DATA_DIR)"
            )
        return key
    path = data_dir / "secret_key"
    if not path.exists():
        _publish_secret_key(path)
    key = path.read_text().strip()
    if len(key) < MIN_SECRET_KEY_LENGTH:
        raise ImproperlyConfigured(
            f"{path} holds no usable SECRET_KEY (fewer than {MIN_SECRET_KEY_LENGTH} "
            "characters): delete it to have a new one generated, or set SECRET_KEY"
        )
    return key


def _publish_secret_key(path: Path) -> None:
    """Write a new key beside path, then link it into place: the file under the final name is
    complete from the moment it appears. When processes start at once, the first link wins and
    every process reads that key."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".secret_key.")  # mode 0600
    try:
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(50))
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass  # another process published first
        except OSError:
            # A filesystem without hard links: create the final name exclusively instead.
            with contextlib.suppress(FileExistsError):
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "w") as f:
                    f.write(Path(tmp).read_text())
    finally:
        os.unlink(tmp)


def _database(data_dir: Path) -> dict:
    url = os.environ.get("DATABASE_URL", "")
    if url:
        try:
            db = dj_database_url.parse(url, conn_max_age=60, conn_health_checks=True)
        except Exception as exc:  # dj_database_url raises several types for bad URLs
            raise ImproperlyConfigured(
                f"DATABASE_URL must be a database URL such as "
                f"postgres://user:password@host:5432/name or sqlite:///path/db.sqlite3: {exc}"
            ) from None
        if not db.get("ENGINE"):
            raise ImproperlyConfigured(f"DATABASE_URL has an unknown scheme: {url.split(':')[0]!r}")
    else:
        db = {"ENGINE": "django.db.backends.sqlite3", "NAME": str(data_dir / "crawlhub.sqlite3")}
    if db["ENGINE"] == "django.db.backends.sqlite3":
        # WAL lets readers work while a worker writes; IMMEDIATE plus a busy timeout makes
        # concurrent writers from several worker processes queue instead of failing.
        db["OPTIONS"] = {
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            "transaction_mode": "IMMEDIATE",
            "timeout": 30,
        }
        db["CONN_MAX_AGE"] = 0
        # A file, not memory, so worker processes started by tests share the test database.
        db["TEST"] = {"NAME": str(Path(db["NAME"]).with_name("test_" + Path(db["NAME"]).name))}
    return db


def _redis_url(data_dir: Path) -> str:
    url = os.environ.get("REDIS_URL", "")
    if not url and os.environ.get("REDIS_SENTINELS", "").strip():
        url = "redis:///0"  # a Sentinel-managed Redis without a password, db 0
    if not url:
        for variable in (*redis_config.TLS_FILES, *redis_config.SENTINEL_SETTINGS):
            if os.environ.get(variable):
                raise ImproperlyConfigured(
                    f"{variable} is set but REDIS_URL is not (nor REDIS_SENTINELS): it is for a "
                    "Redis of your own (REDIS_URL=rediss://..., or the sentinels of one); the "
                    "embedded Redis needs none"
                )
        return launcher.embedded_redis_url(data_dir)
    try:
        return redis_config.client_url(url)
    except redis_config.RedisConfigError as exc:
        raise ImproperlyConfigured(str(exc)) from None


DATA_DIR = _data_dir()
SECRET_KEY = _secret_key(DATA_DIR)
DEBUG = env_bool("DEBUG", False)
ALLOWED_HOSTS = env_hosts("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])
CSRF_FAILURE_VIEW = "crawlhub.web.error_pages.csrf_failure"
REDIS_URL = _redis_url(DATA_DIR)
# True when crawlhub starts and owns its Redis; False when REDIS_URL (or REDIS_SENTINELS) names
# an external one.
REDIS_EMBEDDED = not os.environ.get("REDIS_URL") and not os.environ.get("REDIS_SENTINELS")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "django_rq",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI's files, for /api/docs/
    "axes",
    "crawlhub",
    "crawls",
    "proxies",
]

# daphne's app only puts its `runserver` (with websockets) in Django's place; importing it
# (daphne's server and twisted: ~0.7 s of CPU) is left to that command, instead of paid by every
# worker, cron and management command. `up` and production run daphne itself.
if sys.argv[1:2] == ["runserver"]:
    INSTALLED_APPS.insert(0, "daphne")

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "crawlhub.web.csp.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "crawlhub.web.bad_requests.RefuseNulMiddleware",
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, as django-axes asks: it turns a locked-out login into crawlhub.web.logins' answer.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "crawlhub.urls"
# Request bodies are read into memory up to this size (uploaded files aside; those are spooled
# to disk). A proxy list may be 5 MB (proxies.services.MAX_LIST_BYTES): pasted into the import
# form (form-encoded, ~1.4 times as many bytes) or sent as JSON, it fits. A larger body is
# answered 413 with this limit (crawlhub/web/bad_requests.py).
DATA_UPLOAD_MAX_MEMORY_SIZE = 8 * 1024 * 1024
ASGI_APPLICATION = "crawlhub.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
            # |moment and |ago, the one date style, on every template.
            "builtins": ["crawlhub.templatetags.dates"],
        },
    },
]

DATABASES = {"default": _database(DATA_DIR)}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
# Login throttling (django-axes, crawlhub/web/logins.py): after CRAWLHUB_LOGIN_FAILURES wrong
# passwords for one username from one address, that username is refused from that address, the
# right password too, for CRAWLHUB_LOGIN_COOLOFF_MINUTES after the last failure. Other users and
# other addresses are not affected, nor are API tokens (they never go through a login). Staff
# see and delete the attempts in the admin ("Access attempts"), or `manage.py axes_reset`.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env_int("CRAWLHUB_LOGIN_FAILURES", 5, minimum=1)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("CRAWLHUB_LOGIN_COOLOFF_MINUTES", 15, minimum=1))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
# Refused attempts do not push the end of the lockout back: the time the page tells holds.
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
AXES_LOCKOUT_CALLABLE = "crawlhub.web.logins.lockout_response"
AXES_DISABLE_ACCESS_LOG = True  # failures are kept (until the cool-off), successes are not
AXES_VERBOSE = False  # no start-up line in every command's output
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = env_time_zone("TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = DATA_DIR / "static"
STATIC_ROOT.mkdir(exist_ok=True)
# Serve straight from the app and project folders: `up` needs no collectstatic step.
WHITENOISE_USE_FINDERS = True

RQ_QUEUES = {
    # Short control jobs (supervisor, proxy validation) go first, so long crawl slices
    # never starve them.
    "control": {**redis_config.rq_connection(REDIS_URL), "DEFAULT_TIMEOUT": 300},
    "crawls": {**redis_config.rq_connection(REDIS_URL), "DEFAULT_TIMEOUT": 900},
    "default": {**redis_config.rq_connection(REDIS_URL), "DEFAULT_TIMEOUT": 300},
}
# Enqueue when asked: crawlhub defers its own enqueues with transaction.on_commit. Workers wait
# out a Redis restart, and their work horses die with them (crawlhub/processes/rqworker.py).
RQ = {"COMMIT_MODE": "auto", "WORKER_CLASS": "crawlhub.processes.rqworker.Worker"}
# What a worker imports before it forks work horses (crawlhub/processes/rqworker.py), so that
# each job starts with it: modules the crawl path imports on first use, left out of the start
# of the web server, cron and management commands.
WORKER_PRELOAD = ["extruct"]
RQ_SHOW_ADMIN_LINK = True

# The crawl engine's timing. A slice is one RQ job that crawls for this long, then hands over.
CRAWLHUB_SLICE_SECONDS = env_int("CRAWLHUB_SLICE_SECONDS", 20, minimum=1)
# While another crawl's slice waits for a worker, a slice hands over after this long instead
# (crawls/engine/sharing.py): crawls on the same workers take turns.
CRAWLHUB_SLICE_TURN_SECONDS = env_int("CRAWLHUB_SLICE_TURN_SECONDS", 2, minimum=1)
# A crawl's log keeps the newest this many of its workers' lines of each level (info, warning,
# error); older ones are removed when a slice ends (crawls/engine/crawl_log.py).
CRAWLHUB_LOG_LINES = env_int("CRAWLHUB_LOG_LINES", 5000, minimum=10)
# A claimed request returns to the queue this long after its worker stopped answering.
CRAWLHUB_LEASE_SECONDS = env_int("CRAWLHUB_LEASE_SECONDS", 60, minimum=1)
CRAWLHUB_SUPERVISOR_SECONDS = env_int("CRAWLHUB_SUPERVISOR_SECONDS", 3, minimum=1)
# A crawl's queue keeps at most about this many requests in Redis; the lowest-ranked rest
# waits in the database and comes back as the queue drains (crawls/engine/overflow.py).
CRAWLHUB_FRONTIER_WINDOW = env_int("CRAWLHUB_FRONTIER_WINDOW", 100_000, minimum=20)
# Redis memory (docs/reliability.md, "A Redis that fills up"): the embedded Redis gets this
# maxmemory (0: none) and refuses writes past it rather than evicting a crawl's keys; crawls
# stop taking new work from Redis once it holds CRAWLHUB_REDIS_MEMORY_BUDGET_PERCENT of its
# maxmemory (an external Redis' own maxmemory counts), and go on when memory frees.
CRAWLHUB_REDIS_MAXMEMORY_MB = env_int("CRAWLHUB_REDIS_MAXMEMORY_MB", 0, minimum=0)
CRAWLHUB_REDIS_MEMORY_BUDGET_PERCENT = env_int(
    "CRAWLHUB_REDIS_MEMORY_BUDGET_PERCENT", 85, minimum=1
)
if CRAWLHUB_REDIS_MEMORY_BUDGET_PERCENT > 99:
    raise ImproperlyConfigured(
        "CRAWLHUB_REDIS_MEMORY_BUDGET_PERCENT must be at most 99 (a share of Redis' maxmemory "
        f"left for the writes in flight), got {CRAWLHUB_REDIS_MEMORY_BUDGET_PERCENT}"
    )
# `up` repeats the address and how to log in this often until someone has logged in.
CRAWLHUB_LOGIN_HINT_SECONDS = env_int("CRAWLHUB_LOGIN_HINT_SECONDS", 60, minimum=1)
# After a cancel or a pause, a slice still running this long after is stopped (its work horse
# killed): its fetches in progress are dropped, and fetched again after a resume.
CRAWLHUB_STOP_GRACE_SECONDS = env_int("CRAWLHUB_STOP_GRACE_SECONDS", 3, minimum=1)
# Rendering JavaScript (crawlhub/http/rendering.py): the Chromium to run (empty: Playwright's
# own install, then `chromium` on PATH), pages one worker process renders at once, and pages a
# browser renders before it is replaced by a fresh one.
CRAWLHUB_CHROMIUM = env_str("CRAWLHUB_CHROMIUM", "")
CRAWLHUB_BROWSER_PAGES = env_int("CRAWLHUB_BROWSER_PAGES", 4, minimum=1)
CRAWLHUB_BROWSER_RECYCLE_PAGES = env_int("CRAWLHUB_BROWSER_RECYCLE_PAGES", 200, minimum=1)
# A slice of a crawl that renders crawls at least this long (it starts a browser and its tabs
# first: seconds that short slices would spend over and over).
CRAWLHUB_RENDER_SLICE_SECONDS = env_int("CRAWLHUB_RENDER_SLICE_SECONDS", 60, minimum=1)
# How often due scheduled crawls are looked for (a run starts at most this late).
CRAWLHUB_SCHEDULES_SECONDS = env_int("CRAWLHUB_SCHEDULES_SECONDS", 30, minimum=1)
# How often alert rules are checked against running crawls (crawls/alert_checks.py).
CRAWLHUB_ALERTS_SECONDS = env_int("CRAWLHUB_ALERTS_SECONDS", 30, minimum=1)

# E-mail (alerts): Django's SMTP backend. With no EMAIL_HOST, alerts are shown and sent to
# webhooks, and an e-mail is recorded as not sent, with why.
EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.smtp.EmailBackend")
EMAIL_HOST = env_str("EMAIL_HOST", "")
EMAIL_PORT = env_int("EMAIL_PORT", 25, minimum=1)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
EMAIL_USE_SSL = env_bool("EMAIL_USE_SSL", False)
if EMAIL_USE_TLS and EMAIL_USE_SSL:
    raise ImproperlyConfigured("EMAIL_USE_TLS and EMAIL_USE_SSL cannot both be on: choose one")
EMAIL_TIMEOUT = env_int("EMAIL_TIMEOUT", 10, minimum=1)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "crawlhub@localhost")

# The JSON API (crawlhub/api.py): tokens or the session; JSON only; errors as JSON.
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # First, so that a request without credentials gets 401 with WWW-Authenticate.
        "crawlhub.web.drf.BearerTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["crawlhub.web.drf.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["crawlhub.web.drf.JSONParser"],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "crawlhub.web.api_errors.exception_handler",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "crawlhub API",
    "DESCRIPTION": "Crawls, channels, schedules, webhooks, proxies and exports. Authenticate with "
    "`Authorization: Bearer <token>` (tokens at /account/tokens/) or a session.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated"],
    "COMPONENT_SPLIT_REQUEST": True,
    # A crawl's state appears in several components (crawls, a schedule's runs): one name.
    # Proxies and proxy jobs have a state each too.
    "ENUM_NAME_OVERRIDES": {
        "CrawlStateEnum": "crawls.models.CrawlState",
        "AlertKindEnum": "crawls.models.AlertKind",
        "ProxyStateEnum": "proxies.models.ProxyState",
        "ProxyJobStateEnum": "proxies.models.ProxyJob.State",
        "ProxyJobKindEnum": "proxies.models.ProxyJob.Kind",
    },
}

CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "crawlhub.redis.channel_layer.ChannelLayer",
        "CONFIG": {"hosts": redis_config.channel_layer_hosts(REDIS_URL), "prefix": "crawlhub:asgi"},
    }
}

# Production hardening: on when served over HTTPS (CRAWLHUB_HTTPS=1).
HTTPS = env_bool("CRAWLHUB_HTTPS", False)
SECURE_SSL_REDIRECT = HTTPS
SESSION_COOKIE_SECURE = HTTPS
CSRF_COOKIE_SECURE = HTTPS
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31536000 if HTTPS else 0, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = HTTPS
SECURE_HSTS_PRELOAD = HTTPS
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if HTTPS else None
SECURE_CONTENT_TYPE_NOSNIFF = True
# Crawls refuse hosts that are or resolve to loopback, private, link-local, CGNAT, multicast or
# reserved addresses (crawlhub/http/netguard.py), and so do proxy-list downloads and webhook
# deliveries: the HTTP client asks the guard for every URL and redirect hop, except proxy checks
# of the operator's own PROXY_CHECK_URL. On in production; off by default so that local
# development and the tests can crawl sites on 127.0.0.1.
CRAWLHUB_BLOCK_PRIVATE_NETWORKS = env_bool("CRAWLHUB_BLOCK_PRIVATE_NETWORKS", HTTPS)
# What the guard lets through all the same: an intranet site crawled on purpose. Addresses or
# networks, each with a port or without: "10.1.2.3:8080, 10.9.0.0/16, [fd00::5]:443".
CRAWLHUB_PRIVATE_NETWORKS_ALLOWED = env_list("CRAWLHUB_PRIVATE_NETWORKS_ALLOWED", [])
try:
    netguard.allowed_networks(tuple(CRAWLHUB_PRIVATE_NETWORKS_ALLOWED))
except ValueError as exc:
    raise ImproperlyConfigured(str(exc)) from None
SESSION_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    # RQ's lines for every job (an idle `up` ran the supervisor every few seconds: some 130
    # lines a minute) become one summary a minute (crawlhub/processes/quiet_logs.py).
    "filters": {
        "routine_jobs": {
            "()": "crawlhub.processes.quiet_logs.RoutineJobs",
            "every_job": env_bool("CRAWLHUB_LOG_EVERY_JOB", False),
            "seconds": env_int("CRAWLHUB_LOG_SUMMARY_SECONDS", 60, minimum=1),
        },
        # A 403 or 404 a view raised on purpose is a line, not a traceback.
        "ordinary_refusals": {"()": "crawlhub.processes.quiet_logs.OrdinaryRefusals"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "plain",
            "filters": ["routine_jobs", "ordinary_refusals"],
        }
    },
    "root": {"handlers": ["console"], "level": env_log_level("LOG_LEVEL", "INFO")},
    "loggers": {
        "django.channels.server": {"level": "WARNING"},
        # Failed logins and lockouts are warnings; every successful login is not news.
        "axes": {"level": "WARNING"},
    },
}

# Proxy pool (proxies/). The check URL is fetched *through* each proxy by the validator; the
# default is crawlhub's own echo endpoint, which works offline for proxies on this machine or
# network; `manage.py up` sets it for its workers to the address it serves. For proxies
# elsewhere, point it at this server's public /proxies/echo (or any httpbin-style /get that
# answers {"origin": ..., "headers": {...}}).
PROXY_CHECK_URL = env_str("PROXY_CHECK_URL", "http://127.0.0.1:8000/proxies/echo")
PROXY_CHECK_TIMEOUT = env_int("PROXY_CHECK_TIMEOUT", 10, minimum=1)  # seconds per check
PROXY_VALIDATE_EVERY = env_int("PROXY_VALIDATE_EVERY", 60, minimum=5)  # seconds between passes
PROXY_VALIDATE_BATCH = env_int("PROXY_VALIDATE_BATCH", 50, minimum=1)  # proxies checked at once
# Selection (haipproxy): score > MIN_SCORE, validated within MAX_AGE s, latency <= MAX_LATENCY_MS.
PROXY_MIN_SCORE = env_int("PROXY_MIN_SCORE", 6, minimum=0)
PROXY_MAX_AGE = env_int("PROXY_MAX_AGE", 120, minimum=1)
PROXY_MAX_LATENCY_MS = env_int("PROXY_MAX_LATENCY_MS", 10000, minimum=1)
PROXY_CHANNEL_SIZE = env_int("PROXY_CHANNEL_SIZE", 20, minimum=1)  # proxies per channel refill
PROXY_BAN_SECONDS = env_int("PROXY_BAN_SECONDS", 1800, minimum=1)  # a ban lasts this long
PROXY_GREEDY_MS = env_int("PROXY_GREEDY_MS", 2000, minimum=1)  # greedy keeps proxies faster
try:
    PROXY_BAN_STATUSES = [int(s) for s in env_list("PROXY_BAN_STATUSES", ["403", "429", "503"])]
except ValueError:
    raise ImproperlyConfigured(
        "PROXY_BAN_STATUSES must be HTTP status codes separated by commas, e.g. 403,429,503"
    ) from None
