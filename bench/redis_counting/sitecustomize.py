"""Counts the Redis commands and round trips a process sends (bench/crawl_bench.py only).

Put on PYTHONPATH with CRAWLBENCH_REDIS_COUNTS=<dir>: every process (and every forked child,
e.g. an RQ work horse) writes its own counters to <dir>/<pid> (an mmap of three 64-bit ints:
commands, of which EVAL/EVALSHA, round trips), so they survive os._exit. Redis' INFO
commandstats also counts the commands that scripts run inside Redis; these counters are what
clients sent over the wire.
"""

import os

_DIR = os.environ.get("CRAWLBENCH_REDIS_COUNTS")


def _install() -> None:
    import mmap
    import struct
    import threading

    try:
        import redis.connection as connection
    except ImportError:
        return
    lock = threading.Lock()
    state = {"pid": None, "map": None, "counts": [0, 0, 0]}

    def bump(commands: int, scripts: int, trips: int) -> None:
        with lock:
            pid = os.getpid()
            if state["pid"] != pid:  # first use, or a forked child: a file of its own
                fd = os.open(os.path.join(_DIR, str(pid)), os.O_RDWR | os.O_CREAT, 0o600)
                os.ftruncate(fd, 24)
                state.update(pid=pid, map=mmap.mmap(fd, 24), counts=[0, 0, 0])
                os.close(fd)
            counts = state["counts"]
            counts[0] += commands
            counts[1] += scripts
            counts[2] += trips
            struct.pack_into("<3q", state["map"], 0, *counts)

    def is_script(args) -> bool:
        name = args[0] if args else b""
        if isinstance(name, bytes):
            name = name.decode("latin-1")
        return str(name).upper() in ("EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO")

    # send_command packs with the serializer itself; pack_command(s) serve the other paths
    # (pipelines); all of them end in one send_packed_command per round trip.
    cls = connection.AbstractConnection
    pack_command, pack_commands = cls.pack_command, cls.pack_commands
    send_command, send_packed_command = cls.send_command, cls.send_packed_command

    def counting_send_command(self, *args, **kwargs):
        bump(1, int(is_script(args)), 0)
        return send_command(self, *args, **kwargs)

    def counting_pack_command(self, *args):
        bump(1, int(is_script(args)), 0)
        return pack_command(self, *args)

    def counting_pack_commands(self, commands):
        commands = list(commands)
        bump(len(commands), sum(is_script(c) for c in commands), 0)
        return pack_commands(self, commands)

    def counting_send_packed_command(self, command, *args, **kwargs):
        bump(0, 0, 1)
        return send_packed_command(self, command, *args, **kwargs)

    cls.send_command = counting_send_command
    cls.pack_command = counting_pack_command
    cls.pack_commands = counting_pack_commands
    cls.send_packed_command = counting_send_packed_command


if _DIR:
    _install()


def totals(folder: str) -> tuple[int, int, int]:
    """(commands, scripts, round trips) summed over every process that wrote to folder."""
    import struct

    sums = [0, 0, 0]
    for name in os.listdir(folder):
        with open(os.path.join(folder, name), "rb") as f:
            data = f.read(24)
        if len(data) == 24:
            for i, value in enumerate(struct.unpack("<3q", data)):
                sums[i] += value
    return sums[0], sums[1], sums[2]
