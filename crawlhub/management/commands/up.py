"""`manage.py up`: the whole product in one command: database, Redis, workers, web."""

import logging
import os
import secrets
import socket
import sys
import time

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser

from crawlhub.processes import launcher, process_group, rqworker
from crawlhub.redis import redis_config

QUEUES = ["control", "crawls", "default"]
# Daphne takes a few seconds to import Django and listen; a busy machine takes longer.
WEB_START_SECONDS = 60.0
ANSWER_SECONDS = 2.0  # one attempt at /healthz
SUPERVISE_SECONDS = 0.5  # how often the children (and the embedded Redis) are looked at
# From SIGTERM to the children to SIGKILL for what is left of them: `up` is gone within 10 s of
# its own SIGTERM. A slice gives up the pages it is rendering and finishes those it is fetching,
# a proxy import its batch; what a kill cuts short comes back (leases, a stalled job's takeover).
STOP_SECONDS = 6.0


def _port_free(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def ensure_admin() -> str:
    """How to log in. On the first run with no user, create an admin whose password is
    CRAWLHUB_ADMIN_PASSWORD, else generated and shown this once."""
    User = get_user_model()
    if User.objects.exists():
        admins = User.objects.filter(is_superuser=True, is_active=True).order_by("pk")
        admin = admins.values_list("username", flat=True).first()
        if admin is None:
            return "Log in as an existing user; `./run createsuperuser` adds an admin."
        return (
            f"Log in as an existing user; `./run changepassword {admin}` resets the password "
            f"of the admin {admin!r}."
        )
    username = os.environ.get("CRAWLHUB_ADMIN_USER", "admin")
    password = os.environ.get("CRAWLHUB_ADMIN_PASSWORD", "")
    generated = "" if password else secrets.token_urlsafe(12)
    User.objects.create_superuser(username=username, email="", password=password or generated)
    if not generated:
        return f"Log in as {username!r} with the password in CRAWLHUB_ADMIN_PASSWORD."
    return (
        f"Created admin user {username!r} with password {generated}\n"
        f"  (shown again every minute until someone logs in, then never; "
        f"`./run changepassword {username}` changes it)"
    )


def nobody_logged_in() -> bool:
    """No user has ever logged in: the way in is still worth repeating."""
    return not get_user_model().objects.filter(last_login__isnull=False).exists()


def served_url(host: str, port: int) -> str:
    """The address this machine reaches the server at: a wildcard bind is reached on loopback."""
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


def child_env(environ: dict[str, str], *, redis_url: str, url: str) -> dict[str, str]:
    """The environment of the workers and the web server. Proxy validation fetches this
    server's echo endpoint through each proxy, so its default follows --host and --port;
    a PROXY_CHECK_URL the user set is kept."""
    env = {**environ, "REDIS_URL": redis_url}
    env.setdefault("PROXY_CHECK_URL", f"{url}/proxies/echo")
    return env


def wait_until_served(
    group: process_group.ProcessGroup,
    name: str,
    url: str,
    *,
    timeout: float,
    stopping: process_group.StopSignals | None = None,
) -> bool:
    """Wait until the child `name` of `group` answers over HTTP at url (with any status).

    False when a stop signal came first. CommandError, naming the child, when it exits first
    (a server that cannot start would only fail again), when a child that may not be
    restarted exits, or when url does not answer within timeout seconds; other children are
    restarted meanwhile.
    """
    deadline = time.monotonic() + timeout
    while not stopping:
        if launcher.answers_http(url, timeout=ANSWER_SECONDS):
            return True
        server = group.procs[name]
        if server.poll() is not None:  # before check(), which would restart it
            died = f"{name} (exit code {server.returncode})"
        else:
            died = group.check()
        if died:
            raise CommandError(f"{died} exited before answering at {url}; stopping")
        if time.monotonic() >= deadline:
            raise CommandError(f"{name} did not answer at {url} within {timeout:g} s; stopping")
        time.sleep(0.2)
    return False


class Command(BaseCommand):
    help = (
        "Run crawlhub: migrate, start or reuse Redis, start RQ workers, serve HTTP and websockets."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default="127.0.0.1", help="address to serve on")
        parser.add_argument("--port", type=int, default=8000, help="port to serve on")
        parser.add_argument("--workers", type=int, default=2, help="RQ workers to run (>= 0)")

    def run_from_argv(self, argv: list[str]) -> None:
        """As Django runs a command, then out without the interpreter's teardown once it ended
        (an error with a traceback aside): by then everything `up` started has stopped, and
        freeing a Django process's objects took 2-2.5 s on a loaded machine, a quarter of the
        10 s `up` has to stop in."""
        try:
            super().run_from_argv(argv)
            code = 0
        except SystemExit as exc:  # a CommandError, told on stderr already
            code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)

    def handle(self, *args, host: str, port: int, workers: int, **options) -> None:
        if workers < 0:
            raise CommandError("--workers must be 0 or more")
        if not _port_free(host, port):
            raise CommandError(f"{host}:{port} is already in use: pick another with --port")
        call_command("migrate", interactive=False, verbosity=0)
        login = ensure_admin()
        url = served_url(host, port)
        signals = process_group.StopSignals()
        signals.install()
        redis_server: launcher.EmbeddedRedis | None = None
        group: process_group.ProcessGroup | None = None
        # What a dead child leaves running becomes our child, to be stopped and reaped.
        reaper = process_group.become_subreaper()
        try:
            redis_server = self._start_redis()
            group = self._process_group(
                host=host,
                port=port,
                workers=workers,
                url=url,
                redis_server=redis_server,
                reaper=reaper,
            )
            group.start()
            if wait_until_served(
                group, "web", f"{url}/healthz", timeout=WEB_START_SECONDS, stopping=signals
            ):
                self._say_up(url, login=login, workers=workers)
                self._hint = (url, login, time.monotonic() + settings.CRAWLHUB_LOGIN_HINT_SECONDS)
                self._supervise(group, signals)
        finally:
            self._stop_all(group, redis_server)

    def _process_group(
        self,
        *,
        host: str,
        port: int,
        workers: int,
        url: str,
        redis_server: launcher.EmbeddedRedis | None,
        reaper: bool,
    ) -> process_group.ProcessGroup:
        """Workers (the first one runs RQ's scheduler), cron and the web server; and the
        embedded Redis, when this run started it, to restart if it dies."""
        group = process_group.ProcessGroup(
            env=child_env(dict(os.environ), redis_url=self.redis_url, url=url),
            redis=redis_server,
            reaper=reaper,
            forget=rqworker.forget_worker,
        )
        manage = [sys.executable, str(settings.BASE_DIR / "manage.py")]
        for n in range(workers):
            scheduler = ["--with-scheduler"] if n == 0 else []
            group.add(f"worker-{n + 1}", [*manage, "rqworker", *scheduler, *QUEUES], restart=True)
        group.add("cron", [*manage, "cron"], restart=True)
        web = [sys.executable, "-m", "daphne", "-b", host, "-p", str(port)]
        group.add("web", [*web, "crawlhub.asgi:application"], restart=True)
        return group

    def _say_up(self, url: str, *, login: str, workers: int) -> None:
        self.stdout.write(
            self.style.SUCCESS(f"crawlhub is up at {url}/")
            + f"\n  {login}"
            + f"\n  {workers} worker(s), Redis at {redis_config.masked(self.redis_url)}"
            + f"\n  data in {settings.DATA_DIR}\n  Ctrl-C stops everything."
        )

    def _supervise(
        self, group: process_group.ProcessGroup, signals: process_group.StopSignals
    ) -> None:
        """Until Ctrl-C or SIGTERM: restart Redis, the workers, cron and the web server when
        they die (the log says what died and what was done)."""
        while not signals:
            died = group.check()
            if died:
                raise CommandError(f"{died} exited; stopping")
            self._remind_login()
            time.sleep(SUPERVISE_SECONDS)

    _hint: tuple[str, str, float] | None = None

    def _remind_login(self) -> None:
        """Until someone logs in, the address and the way in again every
        CRAWLHUB_LOGIN_HINT_SECONDS: the first lines scroll away under the workers' output."""
        if self._hint is None or time.monotonic() < self._hint[2]:
            return
        url, login, _ = self._hint
        if not nobody_logged_in():
            self._hint = None
            return
        self.stdout.write(f"Nobody has logged in yet: open {url}/\n  {login}")
        self._hint = (url, login, time.monotonic() + settings.CRAWLHUB_LOGIN_HINT_SECONDS)

    def _stop_all(
        self, group: process_group.ProcessGroup | None, redis_server: launcher.EmbeddedRedis | None
    ) -> None:
        """Stop what this run started, Redis last (and even when stopping the rest failed)."""
        if group is None and redis_server is None:
            return
        self.stdout.write("Stopping web, workers and Redis…")
        try:
            if group is not None:
                group.stop(timeout=STOP_SECONDS)
        finally:
            if redis_server is not None:
                redis_server.stop()
        self.stdout.write("Stopped.")

    def _start_redis(self) -> launcher.EmbeddedRedis | None:
        if not settings.REDIS_EMBEDDED:
            self.redis_url = settings.REDIS_URL
            try:
                redis_config.check(self.redis_url, timeout=3)
            except redis_config.RedisUnreachable as exc:
                raise CommandError(str(exc)) from None
            return None
        server = launcher.EmbeddedRedis(
            settings.DATA_DIR, maxmemory_mb=settings.CRAWLHUB_REDIS_MAXMEMORY_MB
        )
        try:
            started = server.start()
        except launcher.LauncherError as exc:
            raise CommandError(str(exc)) from None
        self.redis_url = server.url
        if not started:
            self.stdout.write(f"Reusing the Redis already running at {server.url}")
            return None
        return server
