"""A Redis as Sentinel manages it: a primary, a replica, and three sentinels that promote the
replica when the primary dies. Every process is a real `redis-server` (`--sentinel` for the
sentinels), on loopback ports of its own; the data nodes and the sentinels have passwords.

    with SentinelRedis(tmp_path) as group:
        env = group.client_env()      # REDIS_SENTINELS, REDIS_SENTINEL_SERVICE, ...
        group.kill_primary()          # kill -9 (unreplicated=0.5: its last writes lost)
        group.wait_for_promotion()    # the replica is the master the sentinels name
"""

from __future__ import annotations

import secrets
import shutil
import signal
import subprocess
import time
from pathlib import Path

import redis

from crawlhub.redis import redis_config
from tests.support import processes
from tests.support.sites import free_port

SERVICE = "crawlhub"
# A sentinel takes a silent primary for down after this long; a failover may take this long.
DOWN_AFTER_MS = 1000
FAILOVER_TIMEOUT_MS = 5000


def redis_server_binary() -> str | None:
    """Debian's redis-server (package redis-server), which also runs a sentinel."""
    return shutil.which("redis-server")


class SentinelRedis(processes.Started):
    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.password = secrets.token_urlsafe(12)
        self.sentinel_password = secrets.token_urlsafe(12)
        self.primary_port = free_port()
        self.replica_port = free_port()
        self.sentinel_ports = [free_port() for _ in range(3)]
        self.procs: dict[str, subprocess.Popen] = {}
        self.killed: set[str] = set()

    # -- what clients are given ------------------------------------------------------------

    def client_env(self) -> dict[str, str]:
        return {
            "REDIS_URL": f"redis://:{self.password}@/0",
            "REDIS_SENTINELS": ",".join(f"127.0.0.1:{port}" for port in self.sentinel_ports),
            "REDIS_SENTINEL_SERVICE": SERVICE,
            "REDIS_SENTINEL_PASSWORD": self.sentinel_password,
        }

    @property
    def url(self) -> str:
        """The client URL crawlhub's settings make of client_env()."""
        env = self.client_env()
        return redis_config.client_url(env["REDIS_URL"], env)

    def node(self, port: int) -> redis.Redis:
        return redis.Redis(port=port, password=self.password, socket_timeout=5)

    def sentinel(self, n: int = 0) -> redis.Redis:
        return redis.Redis(
            port=self.sentinel_ports[n], password=self.sentinel_password, socket_timeout=5
        )

    def master_port(self) -> int | None:
        """The master's port as the first sentinel that answers names it."""
        for n in range(len(self.sentinel_ports)):
            try:
                found = self.sentinel(n).sentinel_get_master_addr_by_name(SERVICE)
            except (redis.ConnectionError, redis.TimeoutError):
                continue
            if found:
                return int(found[1])
        return None

    # -- starting and stopping --------------------------------------------------------------

    def start(self, *, timeout: float = 60) -> SentinelRedis:
        binary = redis_server_binary()
        assert binary, "redis-server is not installed"
        self._start_node("primary", binary, self.primary_port)
        self._start_node(
            "replica", binary, self.replica_port, "--replicaof", "127.0.0.1", str(self.primary_port)
        )
        self._wait(lambda: self._replica_in_sync(), timeout, "the replica to sync")
        for n, port in enumerate(self.sentinel_ports):
            self._start_sentinel(n, binary, port)
        self._wait(lambda: self._sentinels_ready(), timeout, "the sentinels to see each other")
        return self

    def _start_node(self, name: str, binary: str, port: int, *extra: str) -> None:
        data = self.folder / name
        data.mkdir(parents=True, exist_ok=True)
        command = [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(data),
            "--requirepass",
            self.password,
            "--masterauth",
            self.password,
            "--save",
            "",
            "--appendonly",
            "no",
            "--logfile",
            str(data / "redis.log"),
            *extra,
        ]
        self.procs[name] = processes.spawn(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )

    def _start_sentinel(self, n: int, binary: str, port: int) -> None:
        data = self.folder / f"sentinel-{n}"
        data.mkdir(parents=True, exist_ok=True)
        config = data / "sentinel.conf"  # a sentinel rewrites its file: one each
        config.write_text(
            "\n".join(
                [
                    f"port {port}",
                    "bind 127.0.0.1",
                    f"dir {data}",
                    f"logfile {data / 'sentinel.log'}",
                    f"requirepass {self.sentinel_password}",
                    # The sentinels talk to each other with the password they want themselves.
                    f"sentinel sentinel-pass {self.sentinel_password}",
                    f"sentinel monitor {SERVICE} 127.0.0.1 {self.primary_port} 2",
                    f"sentinel auth-pass {SERVICE} {self.password}",
                    f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}",
                    f"sentinel failover-timeout {SERVICE} {FAILOVER_TIMEOUT_MS}",
                    f"sentinel parallel-syncs {SERVICE} 1",
                    "",
                ]
            )
        )
        self.procs[f"sentinel-{n}"] = processes.spawn(
            [binary, str(config), "--sentinel"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def _replica_in_sync(self) -> bool:
        try:
            info = self.node(self.replica_port).info("replication")
        except (redis.ConnectionError, redis.TimeoutError):
            return False
        return info.get("master_link_status") == "up"

    def _sentinels_ready(self) -> bool:
        """Every sentinel knows the primary, the replica and the two other sentinels."""
        for n in range(len(self.sentinel_ports)):
            try:
                master = self.sentinel(n).sentinel_master(SERVICE)
            except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError):
                return False
            if master.get("num-other-sentinels") != 2 or master.get("num-slaves") != 1:
                return False
        return True

    def _wait(self, condition, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            for name, proc in self.procs.items():
                assert name in self.killed or proc.poll() is None, f"{name} exited: {self.logs()}"
            assert time.monotonic() < deadline, f"waited {timeout} s for {what}: {self.logs()}"
            time.sleep(0.1)

    def kill_primary(self, *, unreplicated: float = 0.0) -> int:
        """kill -9 of the primary: no goodbye to its replica or to anyone. With unreplicated,
        the replica is cut off that many seconds before (its link dropped, and it cannot get
        back in: a wrong masterauth), so that the primary's last writes, acknowledged to the
        clients, never reach it: what asynchronous replication may lose in a failover.
        Returns how many bytes of the replication stream the replica missed."""
        primary, replica = self.node(self.primary_port), self.node(self.replica_port)
        if unreplicated:
            replica.config_set("masterauth", "not-the-password")
            primary.client_kill_filter(_type="replica")
            time.sleep(unreplicated)
        written = primary.info("replication")["master_repl_offset"]
        proc = self.procs["primary"]
        self.killed.add("primary")
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        received = replica.info("replication")["master_repl_offset"]
        replica.config_set("masterauth", self.password)
        return written - received

    def wait_for_promotion(self, *, timeout: float = 60) -> None:
        self._wait(
            lambda: self.master_port() == self.replica_port, timeout, "the replica's promotion"
        )

    def logs(self) -> str:
        tails = []
        for path in sorted(self.folder.glob("*/*.log")):
            lines = path.read_text(errors="replace").splitlines()[-8:]
            tails.append(f"--- {path.parent.name}/{path.name}\n" + "\n".join(lines))
        return "\n".join(tails)

    def stop(self) -> None:
        processes.stop_all(list(self.procs.values()), timeout=10)
