"""The children of `up` (workers, cron, the web server) and the embedded Redis it started:
started together, restarted with a backoff when they die, stopped together with everything
below them, work horses included. Linux: it reads /proc.

An RQ worker forks each job into a work horse in a process group of its own (os.setpgrp), and
the worker started with --with-scheduler forks RQ's scheduler too. A horse dies with its worker
(crawlhub.processes.rqworker); anything else a dead child leaves running is orphaned. With
become_subreaper() orphans become children of `up` instead of init's, and ProcessGroup finds
them (children of ours in the session of a child we started), stops and reaps them, and logs it.

Some orphans come from sessions we did not start: Chromium (crawlhub.http.rendering) runs in a
session of its own, and its helpers (zygotes, renderers) outlive the browser process that started
them by a moment, every time a browser closes, about four a rendering slice. They end by
themselves, as zombies, children of `up`: nothing else would ever reap them, and a long rendered
crawl would fill the process table. A group made with reaper=True (`up`, `worker`: a subreaper
that starts nothing but its group) ends and reaps every child it did not start, whatever its
session. Each is waited for by its own pid, never with waitpid(-1), which could take the exit
status of a child the group watches.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path

from crawlhub.processes.launcher import EmbeddedRedis, LauncherError, redis_dir, spawn

log = logging.getLogger(__name__)

_PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Processes orphaned below this one (an RQ work horse or scheduler whose worker died)
    become its children instead of init's, so that it can stop and reap them. Linux only."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        return libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except OSError:
        return False


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name: state, ppid, pgrp, session..."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _processes() -> dict[int, list[str]]:
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (stat := _stat(int(entry))) is not None:
            found[int(entry)] = stat
    return found


def descendants(pid: int) -> list[int]:
    """Every process below pid (Linux /proc), parents before their children."""
    by_parent: dict[int, list[int]] = {}
    for child, stat in _processes().items():
        by_parent.setdefault(int(stat[1]), []).append(child)
    found, todo = [], [pid]
    while todo:
        for child in by_parent.get(todo.pop(0), []):
            if child not in found:
                found.append(child)
                todo.append(child)
    return found


def command_line(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    return " ".join(part.decode(errors="replace") for part in raw.split(b"\0") if part)


def how_it_ended(returncode: int) -> str:
    """A Popen returncode in words: "exited with code 1", "was killed by SIGKILL"."""
    if returncode >= 0:
        return f"exited with code {returncode}"
    try:
        return f"was killed by {signal.Signals(-returncode).name}"
    except ValueError:
        return f"was killed by signal {-returncode}"


class StopSignals:
    """Ctrl-C (SIGINT) and SIGTERM ask a supervising process (`up`, `worker`) to stop: true
    once one came. The handler only records it; the loops that wait look at it between steps."""

    def __init__(self) -> None:
        self.received: int | None = None

    def install(self) -> None:
        signal.signal(signal.SIGINT, self._receive)
        signal.signal(signal.SIGTERM, self._receive)

    def _receive(self, signum: int, frame: object) -> None:
        self.received = signum

    def __bool__(self) -> bool:
        return self.received is not None


class ProcessGroup:
    """The children of `up`: started together; each one that dies restarted after a backoff
    (or, for those that may not be restarted, named); stopped together with everything below
    them. Given the embedded Redis this process started, it restarts that too when it dies,
    before any other child, and holds other restarts until Redis is back.

    What a dead child leaves running is stopped and reaped by check() and stop(), once it
    is this process's child (become_subreaper()).
    """

    FIRST_DELAY = 1.0  # seconds before the first restart; doubled for each death in a row
    MAX_DELAY = 30.0
    STEADY_SECONDS = 60.0  # a child that ran this long counts as healthy: FIRST_DELAY again
    SWEEP_SECONDS = 5.0  # how often to look for orphans when no child died

    def __init__(
        self,
        *,
        env: dict[str, str],
        redis: EmbeddedRedis | None = None,
        reaper: bool = False,
        forget: Callable[[int], None] | None = None,
    ) -> None:
        self.env = env
        self.redis = redis
        # Called with the pid of a child that died or was killed: what it left registered
        # elsewhere (an RQ worker's registration) is removed, not counted until it expires.
        self.forget = forget
        # This process is the subreaper of all below it and starts nothing else (see the module
        # docstring): every child it did not start is an orphan to end and reap.
        self.reaper = reaper
        self.specs: dict[str, tuple[list[str], bool]] = {}
        self.procs: dict[str, subprocess.Popen] = {}
        self.restarts: dict[str, int] = {}
        self._started_at: dict[str, float] = {}
        self._deaths: dict[str, int] = {}  # deaths in a row, each after a short run
        self._due: dict[str, float] = {}  # dead children: when to start each again
        self._sessions: dict[int, str] = {}  # session id -> the child that leads it, or led it
        self._redis_down_since: float | None = None
        self._redis_attempts = 0
        self._redis_due = 0.0
        self._next_sweep = 0.0

    def add(self, name: str, args: list[str], *, restart: bool) -> None:
        self.specs[name] = (args, restart)

    def start(self) -> None:
        for name in self.specs:
            self._start(name)

    def _start(self, name: str) -> None:
        proc = spawn(self.specs[name][0], env=self.env)
        self.procs[name] = proc
        # spawn() makes each child lead a session of its own, which what it starts inherits.
        self._sessions[proc.pid] = f"{name} (pid {proc.pid})"
        self._started_at[name] = time.monotonic()

    def _delay(self, deaths: int) -> float:
        return min(self.MAX_DELAY, self.FIRST_DELAY * 2 ** (deaths - 1))

    def check(self) -> str | None:
        """Restart what died (Redis at once, the others after their backoff), stop what dead
        children left running, and name a child that died and may not be restarted."""
        redis_back = self._check_redis()
        now = time.monotonic()
        died = None
        for name, proc in self.procs.items():
            if name in self._due or proc.poll() is None:
                continue
            self._next_sweep = 0.0  # what it left behind is an orphan now
            self._forget(proc.pid)
            if not self.specs[name][1]:
                died = died or f"{name} (exit code {proc.returncode})"
                continue
            ran = now - self._started_at[name]
            deaths = 1 if ran >= self.STEADY_SECONDS else self._deaths.get(name, 0) + 1
            self._deaths[name] = deaths
            self._due[name] = now + self._delay(deaths)
            log.warning(
                "%s (pid %d) %s after %.0f s; starting it again in %g s",
                name,
                proc.pid,
                how_it_ended(proc.returncode),
                ran,
                self._delay(deaths),
            )
        if now >= self._next_sweep:
            self._next_sweep = now + self.SWEEP_SECONDS
            self.end_orphans()
        if died is None and redis_back:
            for name, due in list(self._due.items()):
                if now >= due:
                    del self._due[name]
                    self._start(name)
                    self.restarts[name] = self.restarts.get(name, 0) + 1
                    log.warning("%s started again (pid %d)", name, self.procs[name].pid)
        return died

    def _check_redis(self) -> bool:
        """Restart the embedded Redis this process started if it died. True when it runs
        (or is not ours to watch)."""
        if self.redis is None:
            return True
        if self._redis_down_since is None:
            code = self.redis.exited()  # reaps it: no zombie is left
            if code is None:
                return True
            self._redis_down_since = time.monotonic()
            self._redis_attempts = 0
            self._redis_due = 0.0
            log.warning(
                "redis-server %s; starting it again at %s with its data (%s)",
                how_it_ended(code),
                self.redis.url,
                redis_dir(self.redis.data_dir),
            )
        if time.monotonic() < self._redis_due:
            return False
        self._redis_attempts += 1
        try:
            self.redis.restart()
        except LauncherError as exc:
            delay = self._delay(self._redis_attempts)
            self._redis_due = time.monotonic() + delay
            log.error("redis-server did not start again: %s; next try in %g s", exc, delay)
            return False
        pid = self.redis.process.pid if self.redis.process else "not ours"
        log.warning(
            "redis-server is back at %s (pid %s), restarted in %.1f s",
            self.redis.url,
            pid,
            time.monotonic() - self._redis_down_since,
        )
        self._redis_down_since = None
        return True

    def end_orphans(self) -> list[int]:
        """SIGKILL and reap the processes that a dead child left running and that became this
        process's children (see become_subreaper): children it did not start, in the session
        of one it did, or in any session for a reaper. A zombie is only reaped. Returns their
        pids."""
        ours = {proc.pid for proc in self.procs.values()}
        if self.redis is not None and self.redis.process is not None:
            ours.add(self.redis.process.pid)
        me = str(os.getpid())
        ended, sessions = [], set()
        for pid, stat in _processes().items():
            session = int(stat[3])
            sessions.add(session)
            if stat[1] != me or pid in ours or not (self.reaper or session in self._sessions):
                continue
            if stat[0] != "Z":
                left_by = self._sessions.get(session, "a process below this one")
                log.warning(
                    "stopping pid %d (%s), left running by %s, which died",
                    pid,
                    command_line(pid)[:120],
                    left_by,
                )
                with suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            with suppress(ChildProcessError):
                os.waitpid(pid, 0)
            ended.append(pid)
        # A session nobody is left in is over: its id may name an unrelated process one day.
        for gone in self._sessions.keys() - sessions - ours:
            del self._sessions[gone]
        return ended

    def _end_all_orphans(self) -> None:
        """end_orphans() until none is left: the children of one ended are ours once it is
        reaped (the kernel hands them over before its parent can reap it), for the next look."""
        for _ in range(100):
            if not self.end_orphans():
                return

    def _forget(self, pid: int) -> None:
        if self.forget is not None:
            self.forget(pid)

    def stop(self, *, timeout: float = 40.0) -> None:
        """SIGTERM every child at once (workers finish their page); SIGKILL what outlives
        `timeout`, and everything below it; then end the orphans."""
        self._due.clear()
        for proc in self.procs.values():
            if proc.poll() is None:
                with suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for name, proc in self.procs.items():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning(
                    "%s (pid %d) did not stop within %g s: killing it", name, proc.pid, timeout
                )
                below = descendants(proc.pid)  # a horse is in a process group of its own
                with suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                for pid in below:
                    with suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                proc.wait()
                self._forget(proc.pid)
        self._end_all_orphans()
