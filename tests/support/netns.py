"""Machines made of Linux network namespaces, for tests that lose a whole host.

    with Network(["a", "b", "c"]) as net:
        net["a"].address                      # 10.213.N.1, host b is .2, ...
        net["b"].spawn(["./run", "worker"])   # a process on host b (ip netns exec)
        net["b"].kill_everything()            # kill -9 every process of the host at once
        net["c"].unplug(); net["c"].plug()    # its cable pulled at the switch, and back

Each host is a namespace with its own loopback and one veth whose other end is a port of a
Linux bridge (the switch). The bridge carries the test's own /24 (10.213.N.0/24) and the
address .254, so this process (the root namespace) sits on the switch as one more machine: the
user's browser, the test's eyes. The hosts have no route but their /24: nothing they send can
leave the machine. N is taken by creating the bridge named after it (creation fails when
another run holds it), so runs side by side get their own subnets and names. Everything is
deleted on the way out, the processes in the namespaces killed first.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import time
from collections.abc import Iterable

from tests.support import processes

PREFIX = "chmh"  # crawlhub multi-host: every name this module makes starts with it
SWITCH = 254  # the root namespace's address on the bridge


def ip(*args: str, namespace: str | None = None, check: bool = True) -> str:
    command = (
        ["ip", *args] if namespace is None else ["ip", "netns", "exec", namespace, "ip", *args]
    )
    result = subprocess.run(command, capture_output=True, text=True, timeout=30)
    if check and result.returncode != 0:
        raise RuntimeError(f"`{' '.join(command)}` failed: {result.stderr.strip()}")
    return result.stdout


def unavailable() -> str:
    """Why this machine cannot make network namespaces here, or "" when it can (tried)."""
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add); this test run is not root"
    name = f"{PREFIX}probe{os.getpid()}"
    try:
        ip("netns", "add", name)
        ip("link", "set", "lo", "up", namespace=name)
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as error:
        return f"this machine cannot create network namespaces: {error}"
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)
    return ""


class Host:
    """One machine: a network namespace with one link to the switch."""

    def __init__(self, network: Network, name: str, number: int) -> None:
        self.name = name
        self.namespace = f"{PREFIX}{network.n}{name}"
        self.port = f"{PREFIX}{network.n}{name}p"  # the switch's end of its cable
        self.address = f"10.213.{network.n}.{number}"
        self.started: list[subprocess.Popen] = []

    def spawn(self, args: list[str], **kwargs) -> subprocess.Popen:
        """A process on this host (tests.support.processes.spawn, inside the namespace)."""
        proc = processes.spawn(["ip", "netns", "exec", self.namespace, *args], **kwargs)
        self.started.append(proc)
        return proc

    def pids(self) -> set[int]:
        """Every process that lives in this host's namespace."""
        result = subprocess.run(
            ["ip", "netns", "pids", self.namespace], capture_output=True, text=True, timeout=30
        )
        return {int(pid) for pid in result.stdout.split()}

    def kill_everything(self) -> int:
        """kill -9 every process of the host at once, as a machine that loses its power; wait
        until they are gone. Returns how many there were."""
        pids = self.pids()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while any(processes.alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        for proc in self.started:
            if proc.pid in pids:
                proc.wait(timeout=30)
        return len(pids)

    def unplug(self) -> None:
        """The cable pulled at the switch: what the host sends is dropped, nothing answers it."""
        ip("link", "set", self.port, "down")

    def plug(self) -> None:
        ip("link", "set", self.port, "up")


class Network(processes.Started):
    """Hosts on one switch, on a /24 of their own; a context manager that deletes it all."""

    def __init__(self, names: Iterable[str]) -> None:
        self.names = list(names)
        self.n = 0
        self.bridge = ""
        self.hosts: dict[str, Host] = {}

    def __getitem__(self, name: str) -> Host:
        return self.hosts[name]

    @property
    def switch_address(self) -> str:
        return f"10.213.{self.n}.{SWITCH}"

    def _take_subnet(self) -> None:
        """Take a free 10.213.N.0/24: the bridge's name is the lock."""
        used = ip("-4", "route", "show")
        for n in random.sample(range(1, 250), 249):
            if f"10.213.{n}." in used:
                continue
            bridge = f"{PREFIX}{n}br"
            if (
                subprocess.run(
                    ["ip", "link", "add", bridge, "type", "bridge"], capture_output=True, timeout=30
                ).returncode
                == 0
            ):
                self.n, self.bridge = n, bridge
                return
        raise RuntimeError("no free 10.213.N.0/24 for the test network")

    def start(self) -> Network:
        self._take_subnet()
        ip("addr", "add", f"{self.switch_address}/24", "dev", self.bridge)
        ip("link", "set", self.bridge, "up")
        for number, name in enumerate(self.names, start=1):
            host = Host(self, name, number)
            self.hosts[name] = host
            ip("netns", "add", host.namespace)
            ip(
                "link",
                "add",
                host.port,
                "type",
                "veth",
                "peer",
                "name",
                "eth0",
                "netns",
                host.namespace,
            )
            ip("link", "set", host.port, "master", self.bridge)
            ip("link", "set", host.port, "up")
            ip("link", "set", "lo", "up", namespace=host.namespace)
            ip("addr", "add", f"{host.address}/24", "dev", "eth0", namespace=host.namespace)
            ip("link", "set", "eth0", "up", namespace=host.namespace)
        return self

    def stop(self) -> None:
        """Kill every process of every host, then delete the namespaces (their veths go with
        them) and the bridge. Safe after a start that failed halfway."""
        for host in self.hosts.values():
            with contextlib.suppress(Exception):
                host.kill_everything()
            processes.stop_all(host.started, timeout=5)
        for host in self.hosts.values():
            subprocess.run(["ip", "netns", "del", host.namespace], capture_output=True, timeout=30)
            subprocess.run(["ip", "link", "del", host.port], capture_output=True, timeout=30)
        if self.bridge:
            subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, timeout=30)
