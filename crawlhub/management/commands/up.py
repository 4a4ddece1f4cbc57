"""`manage.py up`: the whole product in one command: database, Redis, workers, web."""

import os
import secrets
import signal
import socket
import sys
import time

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser

from crawlhub import launcher

QUEUES = ["control", "crawls", "default"]


def _port_free(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def ensure_admin(stdout) -> None:
    """On the first run with no user, create an admin; print a generated password once."""
    User = get_user_model()
    if User.objects.exists():
        return
    username = os.environ.get("CRAWLHUB_ADMIN_USER", "admin")
    password = os.environ.get("CRAWLHUB_ADMIN_PASSWORD", "")
    User.objects.create_superuser(username=username, email="", password=password or None)
    user = User.objects.get(username=username)
    if password:
        stdout.write(
            f"Created admin user {username!r} with the password in CRAWLHUB_ADMIN_PASSWORD."
        )
        return
    password = secrets.token_urlsafe(12)
    user.set_password(password)
    user.save(update_fields=["password"])
    stdout.write(
        f"Created admin user {username!r} with password {password}\n"
        "  (shown only this once; change it with: python manage.py changepassword "
        f"{username})"
    )


class Command(BaseCommand):
    help = (
        "Run crawlhub: migrate, start or reuse Redis, start RQ workers, serve HTTP and websockets."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default="127.0.0.1", help="address to serve on")
        parser.add_argument("--port", type=int, default=8000, help="port to serve on")
        parser.add_argument("--workers", type=int, default=2, help="RQ workers to run (>= 0)")

    def handle(self, *args, host: str, port: int, workers: int, **options) -> None:
        if workers < 0:
            raise CommandError("--workers must be 0 or more")
        if not _port_free(host, port):
            raise CommandError(f"{host}:{port} is already in use: pick another with --port")
        call_command("migrate", interactive=False, verbosity=0)
        ensure_admin(self.stdout)

        redis_server = self._start_redis()
        group = launcher.ProcessGroup(env={**os.environ, "REDIS_URL": self.redis_url})
        manage = [sys.executable, str(settings.BASE_DIR / "manage.py")]
        for n in range(workers):
            scheduler = ["--with-scheduler"] if n == 0 else []
            group.add(f"worker-{n + 1}", [*manage, "rqworker", *scheduler, *QUEUES], restart=True)
        group.add("cron", [*manage, "rqcron", "crawlhub.cron"], restart=True)
        web = [
            sys.executable,
            "-m",
            "daphne",
            "-b",
            host,
            "-p",
            str(port),
            "crawlhub.asgi:application",
        ]
        group.add("web", web, restart=False)

        stop = {"signal": None}

        def request_stop(signum, frame):
            stop["signal"] = signum

        signal.signal(signal.SIGINT, request_stop)
        signal.signal(signal.SIGTERM, request_stop)
        try:
            group.start()
            shown = host if ":" not in host else f"[{host}]"
            self.stdout.write(
                self.style.SUCCESS(f"crawlhub is up at http://{shown}:{port}/")
                + f"\n  {workers} worker(s), Redis at {self.redis_url}"
                + f"\n  data in {settings.DATA_DIR}\n  Ctrl-C stops everything."
            )
            while stop["signal"] is None:
                died = group.check()
                if died:
                    raise CommandError(f"{died} exited; stopping")
                time.sleep(0.5)
        finally:
            self.stdout.write("Stopping web, workers and Redis…")
            group.stop()
            if redis_server is not None:
                redis_server.stop()
            self.stdout.write("Stopped.")

    def _start_redis(self) -> launcher.EmbeddedRedis | None:
        if not settings.REDIS_EMBEDDED:
            self.redis_url = settings.REDIS_URL
            if not launcher.ping(self.redis_url, timeout=3):
                raise CommandError(f"REDIS_URL={self.redis_url} does not answer")
            return None
        server = launcher.EmbeddedRedis(settings.DATA_DIR)
        try:
            started = server.start()
        except launcher.LauncherError as exc:
            raise CommandError(str(exc)) from None
        self.redis_url = server.url
        if not started:
            self.stdout.write(f"Reusing the Redis already running at {server.url}")
            return None
        return server
