"""Processes the tests start, and the proof that none is left behind.

    proc = processes.spawn([sys.executable, "manage.py", "rqworker", "crawls"], cwd=ROOT, env=env)
    try:
        processes.wait_for_http(url, what="daphne", proc=proc, log=log_path)
        ...
    finally:
        processes.stop(proc)

spawn() starts a child in a session of its own (so that it and everything it starts can be told
apart from the test run and killed together), registers it before anyone waits for it, and puts
the session's marker in its environment. stop() ends the child's process group, then anything
still left of its session or below it (RQ runs its work horses in process groups of their own).
The suite's conftest stops whatever a test spawned and did not stop, and after each module and at
the end of the session reports, as a failure, every process still carrying the marker (started
by a helper, by `up`, by Playwright...) and kills it.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import requests

# Every process the suite starts carries MARKER=<session token> <test id> in its environment.
MARKER = "CRAWLHUB_TEST_RUN"

_started: list[subprocess.Popen] = []


class Started:
    """A context manager for a thing with start() (returning itself) and stop(): stop() runs
    on leaving, and also when start() fails half-way, so nothing it started is left behind."""

    def __enter__(self):
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()


def spawn(
    args: list[str],
    *,
    env: dict[str, str] | None = None,
    outlives_the_test: bool = False,
    **kwargs,
) -> subprocess.Popen:
    """Start args in a session of its own, registered for stopping before anything waits for it.

    The child gets SIGTERM if the test run dies (setpriv --pdeathsig, when util-linux has it): call
    this from the main thread, whose end is what the signal follows. With outlives_the_test, the
    test that is running is not the child's owner: a fixture of module or session scope starts
    it (even while setting up a test) and stops it itself; the guard after each module still
    finds it if nobody does."""
    env = dict(os.environ if env is None else env)
    if MARKER in os.environ:
        env.setdefault(MARKER, os.environ[MARKER])
    setpriv = shutil.which("setpriv")
    command = [setpriv, "--pdeathsig", "TERM", *args] if setpriv else list(args)
    proc = subprocess.Popen(command, env=env, start_new_session=True, **kwargs)
    if not outlives_the_test:
        _started.append(proc)
    return proc


def started() -> int:
    """A bookmark in the list of spawned processes, for stop_started_since()."""
    return len(_started)


def stop_started_since(bookmark: int) -> None:
    """Stop every process spawned since the bookmark (and forget them)."""
    stop_all(_started[bookmark:])
    del _started[bookmark:]


def stop(proc: subprocess.Popen, *, timeout: float = 20.0) -> None:
    """SIGTERM the child's process group and wait up to `timeout` for the child to exit (a
    worker finishes its job, `up` stops its own children); then SIGKILL whatever is left of it,
    of the processes below it and of its session. Safe to call twice, and on a child that
    already exited."""
    if proc.returncode is not None:
        return  # reaped earlier: its pid may name another process by now
    family = descendants(proc.pid) | session_members(proc.pid)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and alive(proc.pid):
        time.sleep(0.05)
    # Until the child is reaped its pid (and session id) cannot name another process.
    family |= descendants(proc.pid) | session_members(proc.pid)
    kill({proc.pid, *family} - {os.getpid()})
    proc.wait()


def stop_all(procs: Iterable[subprocess.Popen], *, timeout: float = 20.0) -> None:
    """stop() several children, which shut down side by side (SIGTERM to all of them first)."""
    procs = [proc for proc in procs if proc.returncode is None]
    for proc in procs:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for proc in procs:
        stop(proc, timeout=max(0.1, deadline - time.monotonic()))


def run(
    args: list[str],
    *,
    timeout: float,
    check: bool = False,
    capture_output: bool = False,
    text: bool = False,
    **kwargs,
) -> subprocess.CompletedProcess:
    """subprocess.run, with spawn() and stop(): on a timeout the child and everything it started
    are killed, and the error names the command."""
    if capture_output:
        kwargs.update(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc = spawn(args, text=text, **kwargs)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"{shlex.join(args)} did not finish within {timeout:.0f} s") from None
    finally:
        stop(proc)
    result = subprocess.CompletedProcess(args, proc.returncode, out, err)
    if check:
        result.check_returncode()
    return result


def wait_for_http(
    url: str,
    *,
    what: str,
    timeout: float = 120.0,
    proc: subprocess.Popen | None = None,
    log: Path | None = None,
    request_timeout: float = 10.0,
) -> requests.Response:
    """Poll url until it answers (any status). Fails naming `what`, with the end of its log,
    when `proc` exits or nothing answers within `timeout` seconds; every way a request can fail
    on a busy machine (refused, reset, read timeout...) counts as "not yet"."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while True:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(
                f"{what} exited with code {proc.returncode} before {url} answered{_tail(log)}"
            )
        try:
            return requests.get(url, timeout=min(request_timeout, timeout))
        except requests.RequestException as error:
            last = error
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{what} did not answer {url} within {timeout:.0f} s (last: {last!r}){_tail(log)}"
            )
        time.sleep(0.2)


def _tail(log: Path | None, lines: int = 30) -> str:
    if log is None or not log.exists():
        return ""
    text = log.read_text(errors="replace").splitlines()[-lines:]
    return f"; the end of {log.name}:\n" + "\n".join(text)


# -- /proc ---------------------------------------------------------------------------------------


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name: state, ppid, pgrp, session..."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _pids() -> list[int]:
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]


def alive(pid: int) -> bool:
    stat = _stat(pid)
    return stat is not None and stat[0] != "Z"


def children(pid: int) -> list[int]:
    """The pids of a process's direct children (Linux /proc)."""
    return [child for child in _pids() if (stat := _stat(child)) and int(stat[1]) == pid]


def descendants(pid: int) -> set[int]:
    """Every process below pid."""
    found, todo = set(), [pid]
    while todo:
        for child in children(todo.pop()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def session_members(sid: int) -> set[int]:
    """The processes of the session whose leader is (or was) sid."""
    return {pid for pid in _pids() if (stat := _stat(pid)) and int(stat[3]) == sid}


def command_line(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    return " ".join(part.decode(errors="replace") for part in raw.split(b"\0") if part)


def kill(pids: Iterable[int]) -> None:
    """SIGKILL each live process (and its process group, when it leads one)."""
    for pid in pids:
        if not alive(pid):
            continue
        stat = _stat(pid)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if stat is not None and int(stat[2]) == pid:
                os.killpg(pid, signal.SIGKILL)
            else:
                os.kill(pid, signal.SIGKILL)


# -- leaks ---------------------------------------------------------------------------------------


@dataclass
class Leftover:
    pid: int
    command: str
    started_during: str

    def __str__(self) -> str:
        return f"pid {self.pid} ({self.command[:200]}), started during {self.started_during}"


def _environ(pid: int, *, tries: int = 40) -> bytes:
    """A process's environment (b"" when it is gone). Right after an exec Linux shows an empty
    one for a moment: read again before taking "empty" for an answer."""
    for _ in range(tries):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            return b""
        if environ or not alive(pid):
            return environ
        time.sleep(0.025)
    return b""


def leftovers(token: str, *, exclude: Iterable[int] = ()) -> list[Leftover]:
    """Live processes (other than this one and `exclude`) whose environment carries this
    session's marker."""
    skip = {os.getpid(), *exclude}
    prefix = f"{MARKER}={token} ".encode()
    found = []
    for pid in _pids():
        if pid in skip:
            continue
        environ = _environ(pid)
        for entry in environ.split(b"\0"):
            if entry.startswith(prefix) and alive(pid):
                origin = entry[len(prefix) :].decode(errors="replace")
                found.append(Leftover(pid, command_line(pid), origin))
                break
    return found


def reap_leftovers(
    token: str, *, exclude: Iterable[int] = (), grace: float = 5.0
) -> list[Leftover]:
    """Leftovers that are still there after `grace` seconds (a process being stopped may take a
    moment to exit), killed. Returns what was found."""
    deadline = time.monotonic() + grace
    while (found := leftovers(token, exclude=exclude)) and time.monotonic() < deadline:
        time.sleep(0.2)
    if found:
        kill(leftover.pid for leftover in found)
    return found
