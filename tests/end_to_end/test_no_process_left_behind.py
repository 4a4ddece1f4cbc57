"""The suite's own processes (tests/support/processes.py): a child is stopped with everything it
started, a readiness wait on a busy machine takes a slow answer for "not yet" and says what did
not come up, and a process left behind is found with the test that started it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest
import requests

from tests.support import processes
from tests.support.sites import RawServer, free_port, raw_head

# A parent that starts a child in a process group of its own, as RQ starts a work horse, and
# waits. The child prints its pid once it is in its own group (on a busy machine, the parent
# can run on long before the child does).
PARENT_OF_A_HORSE = """
import os, sys, time
pid = os.fork()
if pid == 0:
    os.setpgrp()
    print(os.getpid(), flush=True)
    time.sleep(300)
    os._exit(0)
time.sleep(300)
"""


DEAF_TO_SIGTERM = """
import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("deaf", flush=True)
time.sleep(300)
"""


def gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while processes.alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_stop_ends_the_child_and_a_grandchild_in_a_group_of_its_own():
    parent = processes.spawn([sys.executable, "-c", PARENT_OF_A_HORSE], stdout=subprocess.PIPE)
    horse = int(parent.stdout.readline())
    assert processes.alive(horse) and os.getpgid(horse) != parent.pid
    processes.stop(parent)
    assert parent.returncode is not None
    assert gone_within(horse, 10), "the work horse outlived its worker"


def test_stop_kills_a_child_that_ignores_sigterm_once_the_timeout_is_over():
    child = processes.spawn([sys.executable, "-c", DEAF_TO_SIGTERM], stdout=subprocess.PIPE)
    child.stdout.readline()  # SIGTERM is ignored from here on
    started = time.monotonic()
    processes.stop(child, timeout=0.5)
    assert child.returncode == -9
    assert time.monotonic() - started < 10


def test_a_process_left_behind_is_found_with_the_test_that_started_it(redis_server):
    token, test = os.environ[processes.MARKER].split(" ", 1)
    session_redis = [redis_server.process.pid]  # carries the marker too, and stays
    assert test.endswith("::test_a_process_left_behind_is_found_with_the_test_that_started_it")
    stray = subprocess.Popen(["sleep", "300"], start_new_session=True)  # not through spawn()
    try:
        [found] = processes.leftovers(token, exclude=session_redis)
        assert (found.pid, found.command, found.started_during) == (stray.pid, "sleep 300", test)
        reaped = processes.reap_leftovers(token, exclude=session_redis, grace=0)
        assert [left.pid for left in reaped] == [stray.pid]
        assert stray.wait(10) == -9
    finally:
        stray.kill()
        stray.wait()
    assert processes.leftovers(token, exclude=session_redis) == []


def test_a_readiness_wait_takes_a_read_timeout_for_not_yet():
    """The server accepts at once but answers only its third connection: each earlier request
    ends in a ReadTimeout, which must not end the wait."""

    def play(conn: socket.socket, server: RawServer) -> None:
        if len(server.heads) < 3:
            while server.alive():  # accepted, never answered
                time.sleep(0.05)
            return
        conn.sendall(raw_head(Content_Length="2", Connection="close") + b"ok")

    with RawServer(play, lifetime=60) as server:
        response = processes.wait_for_http(
            server.url + "/healthz", what="the slow server", timeout=60, request_timeout=0.2
        )
    assert response.status_code == 200 and len(server.heads) == 3
    # What each request of the wait got before the third, and what used to end such waits:
    with RawServer(play, lifetime=5) as server, pytest.raises(requests.ReadTimeout):
        requests.get(server.url, timeout=0.3)


def test_a_readiness_wait_names_what_did_not_come_up():
    url = f"http://127.0.0.1:{free_port()}/healthz"
    with pytest.raises(AssertionError, match=f"^daphne did not answer {url} within 1 s"):
        processes.wait_for_http(url, what="daphne", timeout=1)


def test_a_readiness_wait_ends_when_the_process_exits_and_shows_its_log(tmp_path):
    log = tmp_path / "server.log"
    with log.open("w") as out:
        proc = processes.spawn(
            [sys.executable, "-c", "import sys; print('port in use'); sys.exit(3)"],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{free_port()}/"
    with pytest.raises(AssertionError, match="(?s)the server exited with code 3.*port in use"):
        processes.wait_for_http(url, what="the server", proc=proc, log=log, timeout=60)
