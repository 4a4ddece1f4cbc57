"""`manage.py worker` (`./run worker`): this machine's share of a deployment's crawling.

N RQ workers for the Redis of REDIS_URL and the database of DATABASE_URL, supervised as `up`
supervises its own (crawlhub.processes.process_group: restarted when they die, stopped together on
SIGTERM, a slice in progress handing its requests back). No web server, no cron, no Redis of its
own: the machine that runs `up` runs those.
"""

import os
import socket
import sys
import time

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError, connection
from django.db.migrations.executor import MigrationExecutor
from rq import Worker

from crawlhub.processes import process_group, rqworker
from crawlhub.redis import redis_config
from crawlhub.redis.connections import REDIS_ERRORS, get_redis

QUEUES = ["control", "crawls", "default"]
SUPERVISE_SECONDS = 0.5
# How long `worker` waits for its workers' SIGTERM: a slice finishes the pages in hand first.
STOP_SECONDS = 40.0


def database_where() -> str:
    """The database in words, without its password: "postgresql crawlhub on db.lan:5432"."""
    s = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite {s['NAME']}"
    return f"{connection.vendor} {s['NAME']} on {s['HOST'] or 'localhost'}:{s['PORT'] or 5432}"


def migrations_out_of_step() -> str:
    """Why this version cannot work on the database, or "" when its migrations match ours."""
    executor = MigrationExecutor(connection)
    missing = [
        f"{m.app_label}.{m.name}"
        for m, _ in executor.migration_plan(executor.loader.graph.leaf_nodes())
    ]
    if missing:
        return (
            f"the database {database_where()} lacks {len(missing)} migration(s) of this "
            f"version ({', '.join(missing[:3])}{'…' if len(missing) > 3 else ''}): upgrade "
            "it first with `./run migrate` (or `./run up`) on the machine that serves the web"
        )
    ours = set(executor.loader.graph.nodes)
    known_apps = {app for app, _ in ours}
    unknown = sorted(
        f"{app}.{name}"
        for app, name in executor.loader.applied_migrations
        if app in known_apps and (app, name) not in ours
    )
    if unknown:
        return (
            f"the database {database_where()} has migration(s) this version does not know "
            f"({', '.join(unknown[:3])}): it was upgraded by a newer crawlhub; upgrade this "
            "machine to the same version"
        )
    return ""


class Command(BaseCommand):
    help = (
        "Join a deployment: run RQ workers on this machine for the Redis of REDIS_URL and the "
        "database of DATABASE_URL (no web server, no Redis of its own). SIGTERM stops them."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--workers",
            type=int,
            default=os.cpu_count() or 1,
            help="RQ worker processes to run (default: one per core)",
        )

    def handle(self, *args, workers: int, **options) -> None:
        if workers < 1:
            raise CommandError("--workers must be 1 or more")
        self._check_deployment()
        signals = process_group.StopSignals()
        signals.install()
        group = process_group.ProcessGroup(
            env={**os.environ, "REDIS_URL": settings.REDIS_URL},
            reaper=process_group.become_subreaper(),
            forget=rqworker.forget_worker,
        )
        manage = [sys.executable, str(settings.BASE_DIR / "manage.py")]
        for n in range(workers):
            # RQ's scheduler (delayed jobs, webhook retries) runs where a lock lets it: one
            # worker of each machine offers to run it, so it survives any one machine.
            scheduler = ["--with-scheduler"] if n == 0 else []
            group.add(f"worker-{n + 1}", [*manage, "rqworker", *scheduler, *QUEUES], restart=True)
        try:
            group.start()
            url = settings.REDIS_URL
            self._say(
                f"Joined the deployment from {socket.gethostname()}: Redis at "
                f"{redis_config.masked(url)}, {redis_config.where(url)}; database "
                f"{database_where()}; starting {workers} worker(s). SIGTERM stops them."
            )
            self._supervise(group, signals)
        finally:
            self._say(f"Stopping {workers} worker(s): slices in progress hand their requests back…")
            group.stop(timeout=STOP_SECONDS)
            self._say("Stopped.")

    def _say(self, line: str) -> None:
        self.stdout.write(line)
        self.stdout.flush()

    def _check_deployment(self) -> None:
        if settings.REDIS_EMBEDDED:
            raise CommandError(
                "REDIS_URL is not set: `./run worker` joins the Redis a deployment shares "
                "(REDIS_URL=redis://host:port/0, or rediss:// for TLS; or REDIS_SENTINELS and "
                "REDIS_SENTINEL_SERVICE for one that Sentinel manages). `./run up` runs "
                "everything on one machine, its own Redis included."
            )
        try:
            redis_config.check(settings.REDIS_URL)
        except redis_config.RedisUnreachable as exc:
            raise CommandError(str(exc)) from None
        try:
            problem = migrations_out_of_step()
        except DatabaseError as exc:
            raise CommandError(
                f"the database {database_where()} does not answer: {exc}".strip()
            ) from None
        finally:
            connection.close()  # the workers open their own; this process needs none
        if problem:
            raise CommandError(problem)
        if connection.vendor == "sqlite":
            self.stderr.write(
                "DATABASE_URL is not set or is SQLite: only workers on this machine share it. "
                "A deployment on several machines uses PostgreSQL (DATABASE_URL=postgres://...)."
            )

    def _supervise(
        self, group: process_group.ProcessGroup, signals: process_group.StopSignals
    ) -> None:
        """Until SIGTERM or Ctrl-C: restart the workers that die, and say under which RQ name
        each one (and each restarted one) joined."""
        named: set[int] = set()
        while not signals:
            group.check()
            pids = {proc.pid: name for name, proc in group.procs.items() if proc.poll() is None}
            if pids.keys() - named:
                named |= self._name_joined(pids, named)
            time.sleep(SUPERVISE_SECONDS)

    def _name_joined(self, pids: dict[int, str], named: set[int]) -> set[int]:
        """Log the RQ worker name of each child that registered since last time."""
        here = socket.gethostname()
        try:
            registered = Worker.all(connection=get_redis())
        except REDIS_ERRORS:
            return set()  # the workers wait for Redis; so does this
        found = set()
        for worker in registered:
            if worker.hostname == here and worker.pid in pids and worker.pid not in named:
                self._say(
                    f"{pids[worker.pid]} (pid {worker.pid}) joined as RQ worker {worker.name}"
                )
                found.add(worker.pid)
        return found
