"""A PostgreSQL server of the test's own: a fresh cluster (initdb) in a temporary folder, run as
the `postgres` user on `host`, started through `launch` (e.g. ["ip", "netns", "exec", name]),
with a password for a superuser named crawlhub. Durability is off (fsync): a test's database.

    with PrivatePostgres(host="10.213.7.1", launch=net["a"].launch) as db:
        db.url  # postgres://crawlhub:...@10.213.7.1:5432/crawlhub
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import psycopg

from tests.support import processes

USER = "crawlhub"


def binaries() -> Path | None:
    """The newest installed PostgreSQL's bin folder (Debian's layout), or None."""
    found = glob.glob("/usr/lib/postgresql/*/bin/postgres")
    found.sort(key=lambda path: int(path.split("/")[4]))
    return Path(found[-1]).parent if found else None


def unavailable() -> str:
    """Why a private PostgreSQL cannot run here, or ""."""
    if binaries() is None:
        return "no PostgreSQL server installed (/usr/lib/postgresql/*/bin/postgres)"
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        return "no `postgres` system user to run a PostgreSQL server as"
    return ""


class PrivatePostgres(processes.Started):
    def __init__(self, *, host: str, launch: Sequence[str] = (), port: int = 5432) -> None:
        self.host, self.port, self.launch = host, port, list(launch)
        self.password = secrets.token_urlsafe(16)
        self.folder = Path(tempfile.mkdtemp(prefix="crawlhub-pg-"))  # postgres must reach it
        self.data = self.folder / "data"
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"postgres://{USER}:{self.password}@{self.host}:{self.port}/crawlhub"

    def _as_postgres(self, command: list[str]) -> list[str]:
        return ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", *command]

    def start(self, *, timeout: float = 120) -> PrivatePostgres:
        bin_ = binaries()
        account = pwd.getpwnam("postgres")
        password_file = self.folder / "password"
        password_file.write_text(self.password)
        for path in (self.folder, password_file):
            shutil.chown(path, account.pw_uid, account.pw_gid)
        subprocess.run(
            self._as_postgres(
                [
                    str(bin_ / "initdb"),
                    "-D",
                    str(self.data),
                    "-U",
                    USER,
                    "-E",
                    "UTF8",
                    f"--pwfile={password_file}",
                    "--auth-local=trust",
                    "--auth-host=scram-sha-256",
                    "--no-sync",
                ]
            ),
            check=True,
            capture_output=True,
            timeout=timeout,
        )
        with (self.data / "pg_hba.conf").open("a") as hba:
            hba.write(f"host all all {self.host}/24 scram-sha-256\n")
        log = (self.folder / "postgres.log").open("w")
        self.process = processes.spawn(
            [
                *self.launch,
                *self._as_postgres(
                    [
                        str(bin_ / "postgres"),
                        "-D",
                        str(self.data),
                        "-p",
                        str(self.port),
                        "-c",
                        f"listen_addresses={self.host}",
                        "-c",
                        f"unix_socket_directories={self.folder}",
                        "-c",
                        "fsync=off",
                        "-c",
                        "synchronous_commit=off",
                        "-c",
                        "full_page_writes=off",
                        "-c",
                        "max_connections=200",
                    ]
                ),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + timeout
        while True:
            try:
                with psycopg.connect(
                    host=self.host,
                    port=self.port,
                    user=USER,
                    password=self.password,
                    dbname="postgres",
                    connect_timeout=5,
                    autocommit=True,
                ) as connection:
                    connection.execute("CREATE DATABASE crawlhub")
                return self
            except psycopg.OperationalError as error:
                assert self.process.poll() is None, f"postgres exited: {self.log()}"
                assert time.monotonic() < deadline, f"no PostgreSQL within {timeout} s: {error}"
                time.sleep(0.2)

    def log(self) -> str:
        path = self.folder / "postgres.log"
        return path.read_text(errors="replace")[-2000:] if path.exists() else "no log"

    def stop(self) -> None:
        if self.process is not None:
            # SIGTERM would wait for every client to leave; SIGINT is the fast shutdown.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGINT)
            processes.stop(self.process, timeout=20)
            self.process = None
        with contextlib.suppress(OSError):
            shutil.rmtree(self.folder)
