"""The process that runs a crawl's extraction rules (`python -m crawls.engine.rule_process`,
started and fed by evaluator.py), its bounds, and what it shares with the process that started
it.

It reads frames of a 4-byte length and bytes on stdin: the rules (JSON), then for each page a
request (JSON: url, content type, the rules to skip, the CPU seconds the page has) and the body.
What each rule found goes into the Journal; once the page is done the process writes one frame
on stdout, empty (the journal has every outcome) or, when they did not all fit there, the page's
{"fields": ..., "errors": ...} as extraction.Extraction has them. It ends when stdin ends (its
parent closed it, or died).

Bounds, set by the process on itself (the parent sets the page's wall-time deadline):
- each rule has RULE_SECONDS of CPU on a page (fewer when the page's run out). A timer then
  raises extraction.Overrun into it, and it keeps the values it found; a rule inside a call to C
  (lxml's XPath, RE2's search) is out of the timer's reach, and the kernel ends the process
  (SIGXCPU) about a second later (RLIMIT_CPU counts whole seconds);
- its memory may grow MAX_MEMORY past its size once started (RLIMIT_AS): a rule needing more
  gets MemoryError, and says so.

The Journal, in memory both processes map, says which rule the process is running and what each
finished rule gave: the page's answer, and if the process ends on a page, its parent knows which
rule it was and keeps what the others found.
"""

from __future__ import annotations

import json
import math
import mmap
import os
import resource
import signal
import struct
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from crawls.engine.extraction import Extractor, Outcome, Overrun, Page, parse_rules

RULE_SECONDS = 1.0  # CPU of one rule on one page
PAGE_SECONDS = 3.0  # CPU of all the rules of one page
MIN_SECONDS = 0.1  # a rule is not started with less left of the page's
MAX_MEMORY = 512 * 1024 * 1024  # what the process may grow by, past its size once started
# What a rule inside C may run past its seconds before the kernel ends the process.
KERNEL_GRACE = 0.5
FRAME = struct.Struct(">I")
READY = b"R"  # the first byte a rule process writes, once its imports are done


def cpu_message(seconds: float) -> str:
    return (
        f"the rule took too long: over {round(seconds, 1):g} s of CPU on this page; it was stopped"
    )


def memory_message() -> str:
    return (
        f"the rule needed more than {MAX_MEMORY // (1024 * 1024)} MB of memory on this page; it "
        "was stopped"
    )


def spent_message() -> str:
    return f"not run: this page's rules used their {PAGE_SECONDS:g} s of CPU"


class Journal:
    """The rule the process runs on its page, and the outcome of each rule it finished there
    (as long as they fit), in a memory file both processes map: the parent clears it before
    each page, and reads it when the process ended on one."""

    SIZE = 1024 * 1024
    NONE = -1  # no rule started yet
    _HEAD = struct.Struct("<ii")  # the rule running, the bytes of outcomes after the head
    _RECORD = struct.Struct("<ii")  # a rule's index, the bytes of its outcome (JSON)

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.memory = mmap.mmap(fd, self.SIZE)

    @classmethod
    def create(cls) -> Journal:
        fd = os.memfd_create("crawlhub-rules")
        os.ftruncate(fd, cls.SIZE)
        return cls(fd)

    def close(self) -> None:
        self.memory.close()
        os.close(self.fd)

    def clear(self) -> None:
        self._HEAD.pack_into(self.memory, 0, self.NONE, 0)

    def running(self, index: int) -> None:
        struct.pack_into("<i", self.memory, 0, index)

    def finished(self, index: int, outcome: Outcome) -> bool:
        """Whether the outcome fit (else the journal is no longer complete for this page)."""
        data = json.dumps(outcome).encode()
        used = self._HEAD.unpack_from(self.memory, 0)[1]
        start = self._HEAD.size + used
        end = start + self._RECORD.size + len(data)
        if end > self.SIZE:
            return False
        self._RECORD.pack_into(self.memory, start, index, len(data))
        self.memory[start + self._RECORD.size : end] = data
        struct.pack_into("<i", self.memory, 4, end - self._HEAD.size)
        return True

    def read(self) -> tuple[int, dict[int, Outcome]]:
        """(the rule that was running, {index: (value, error)} of the rules finished)."""
        running, used = self._HEAD.unpack_from(self.memory, 0)
        outcomes, at = {}, self._HEAD.size
        while at < self._HEAD.size + used:
            index, size = self._RECORD.unpack_from(self.memory, at)
            at += self._RECORD.size
            value, error = json.loads(self.memory[at : at + size])
            outcomes[index] = (value, error)
            at += size
        return running, outcomes


class Bounds:
    """What runs each rule (an extraction.Guard): it notes the rule in the journal, gives it its
    CPU (the timer, then the kernel's limit), and turns what stopped it into its error."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        self.armed = False
        self.seconds = RULE_SECONDS
        self.page_ends = 0.0  # the process's CPU time at which the page's seconds are spent
        self.complete = True  # every outcome of the page is in the journal
        self.fired = False  # the timer stopped the rule being run
        signal.signal(signal.SIGPROF, self._overrun)

    def start_page(self, cpu_seconds: float) -> None:
        self.page_ends = time.process_time() + cpu_seconds
        self.complete = True

    def __call__(self, index: int, run: Callable[[], Outcome]) -> Outcome:
        self.journal.running(index)
        used = time.process_time()
        self.seconds = min(RULE_SECONDS, self.page_ends - used)
        if self.seconds < MIN_SECONDS:
            outcome: Outcome = (None, spent_message())
        else:
            outcome = self._bounded(run, used)
        self.complete = self.journal.finished(index, outcome) and self.complete
        return outcome

    def _bounded(self, run: Callable[[], Outcome], used: float) -> Outcome:
        self.fired = False
        try:
            try:
                self._arm(used)
                return run()
            finally:
                self._disarm()
        except Overrun as exc:  # raised after the rule returned, before the timer was off
            return None, str(exc)
        except MemoryError:
            return None, memory_message()
        finally:
            if self.fired:
                # A rule stopped by its timer used its seconds, as its error says, whether the
                # Overrun reached here or the rule kept its values and returned (Rule.run). The
                # timer counts the kernel's CPU time, which on a loaded machine was seen to run
                # ahead of process_time's: charged what process_time saw, a page's stopped
                # rules left seconds for more rules than PAGE_SECONDS holds.
                self.page_ends -= max(0.0, used + self.seconds - time.process_time())

    def _arm(self, used: float) -> None:
        limit = math.ceil(used + self.seconds + KERNEL_GRACE)
        resource.setrlimit(resource.RLIMIT_CPU, (limit, resource.RLIM_INFINITY))
        self.armed = True
        signal.setitimer(signal.ITIMER_PROF, self.seconds)

    def _disarm(self) -> None:
        self.armed = False
        signal.setitimer(signal.ITIMER_PROF, 0)
        # Reading the next page is no rule's time.
        resource.setrlimit(resource.RLIMIT_CPU, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))

    def _overrun(self, signum, frame) -> None:
        if self.armed:
            self.armed = False
            self.fired = True
            raise Overrun(cpu_message(self.seconds))


def read_frame(stream: BinaryIO) -> bytes | None:
    """One frame's bytes; None at the end of the stream."""
    head = stream.read(FRAME.size)
    if len(head) < FRAME.size:
        return None
    length = FRAME.unpack(head)[0]
    data = stream.read(length)
    return data if len(data) == length else None


def _cap_memory() -> None:
    """The process may grow MAX_MEMORY from now on, and writes no core file when killed."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            size = int(line.split()[1]) * 1024
            resource.setrlimit(resource.RLIMIT_AS, (size + MAX_MEMORY, resource.RLIM_INFINITY))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def main(journal_fd: int) -> None:
    # Ctrl-C in a terminal reaches every process of the group: the parent decides when to stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    source, answers = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # a stray print must not break the exchange
    answers.write(READY)  # imports done: the parent's deadlines count from here
    answers.flush()
    rules = read_frame(source)
    if rules is None:
        return
    extractor = Extractor(parse_rules(json.loads(rules)))
    bounds = Bounds(Journal(journal_fd))
    _cap_memory()
    while (header := read_frame(source)) is not None and (body := read_frame(source)) is not None:
        request = json.loads(header)
        page = Page(url=request["url"], body=body, content_type=request["content_type"])
        bounds.start_page(request["cpu"])
        found = extractor.extract_page(page, skip=set(request["skip"]), guard=bounds)
        del page, body
        answer = b""
        if not bounds.complete:
            answer = json.dumps({"fields": found.fields, "errors": found.errors}).encode()
        answers.write(FRAME.pack(len(answer)) + answer)
        answers.flush()


if __name__ == "__main__":
    main(int(sys.argv[1]))
