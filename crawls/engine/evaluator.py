"""A crawl's extraction rules, run so that none can run away: in a process of their own where
each rule's CPU time and memory are bounded, unless its cost is linear in the page, and a rule
that runs away is stopped while the crawl goes on.

    with Evaluator(rules) as evaluator:           # a slice's (or the preview's, with a deadline)
        extraction = evaluator.extract(url=..., body=..., content_type=...)

Why a process: a JMESPath expression of 200 characters makes 10^8 items out of `{}` (each of
`[@,@,...,@][]` makes ten of each item), an XPath or a CSS selector (`p ~ p ~ p`) takes hours
on a page of a few hundred kilobytes, and RE2 falls back to an engine that takes a minute for
4 MB. lxml and RE2 do such work inside one call into C, which nothing in the same process can
interrupt; a process can be killed, and its memory capped.

Rules whose cost is linear in the page whatever the page (rule_cost.py: CSS selectors without
descendant or sibling combinators or pseudo-classes, JMESPath paths without functions or
multiselects) need no bound and run where the page is, in the caller's thread, as every rule
did before; a crawl with only such rules starts no process. The others run in the rule
process (rule_process.py, which says its bounds: CPU a rule and a page, memory), started with
the first page that needs it and reading page after page, one at a time; threads share it.
This side adds the wall-time deadline of a page: a few seconds for the preview, which nobody
waits minutes for; in a crawl PAGE_DEADLINE, only a backstop for a process that gets no CPU,
since CPU time is what the process's own bounds count. Past the deadline the process is killed.

When the process ended on a page (the kernel's CPU limit, a crash, the deadline), the rule it
was running gets an error saying why, the rules it had finished keep what they found (its
journal), the page's other rules are run by a new process while the page has CPU left, and the
next page is read by the new process. Every rule that applies to a page gets a value or an
error, never an exception, and the slice that asked goes on.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from crawls.engine.extraction import Extraction, Extractor, Outcome, Page
from crawls.engine.extraction_rules import Rule, rules_to_json
from crawls.engine.rule_cost import linear
from crawls.engine.rule_process import (
    FRAME,
    KERNEL_GRACE,
    PAGE_SECONDS,
    READY,
    RULE_SECONDS,
    Journal,
    cpu_message,
    spent_message,
)

log = logging.getLogger(__name__)

# Wall time for one page's rules in a crawl: CPU time is the bound; this only ends a process
# that gets none (stopped, swapping) instead of holding the slice.
PAGE_DEADLINE = 60.0
# What a rule the kernel stopped costs its page: its time past the limit (RLIMIT_CPU counts
# whole seconds) and a new process's start, counted against PAGE_SECONDS.
_KILL_COST = RULE_SECONDS + KERNEL_GRACE + 0.5
_ROOT = Path(__file__).resolve().parents[2]
# A new rule process says it is ready (its imports done) within this: its start-up is not
# counted against a page's deadline, which a loaded machine would otherwise spend on imports.
START_SECONDS = 60.0


class Evaluator:
    """The rules, run on pages in a process of their own (see the module docstring). Threads
    may share one: pages are read one at a time. close() ends the process."""

    def __init__(
        self, rules: Sequence[Rule], *, deadline: float = PAGE_DEADLINE, linear_here: bool = True
    ) -> None:
        """RulesError when `rules` are not what parse_rules would give. Without `linear_here`,
        every rule runs in the rule process (the preview: no rule runs in the web server)."""
        self._local = Extractor(rules)
        # Rules whose cost is linear in the page run here (rule_cost.py); the rest there.
        self._elsewhere = [
            index for index, rule in enumerate(rules) if not (linear_here and linear(rule))
        ]
        self._not_here = frozenset(self._elsewhere)
        self._rules = rules_to_json(rules)
        self.deadline = deadline
        self._lock = threading.Lock()
        self._process: _Process | None = None
        self._journal: Journal | None = None  # made with the first process

    def __enter__(self) -> Evaluator:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            if self._process is not None:
                self._process.end()
                self._process = None
            if self._journal is not None:
                self._journal.close()
                self._journal = None

    def extract(self, *, url: str, body: bytes, content_type: str) -> Extraction:
        """The fields of one page, as Extractor.extract gives them, within the bounds."""
        page = Page(url=url, body=body, content_type=content_type)
        found = self._local.outcomes(page, skip=self._not_here)  # threads at once
        applying = [index for index in self._elsewhere if self._local.applies(index, url)]
        if applying:
            with self._lock:  # one page at a time in the process
                found |= self._extract(url, body, content_type, applying)
        return self._local.extraction(found)

    def _extract(
        self, url: str, body: bytes, content_type: str, applying: list[int]
    ) -> dict[int, Outcome]:
        """What the rules at `applying` give, read by the rule process."""
        deadline = time.monotonic() + self.deadline
        names = self._local.names
        skip = [index for index in range(len(names)) if index not in applying]
        done: dict[int, Outcome] = {}  # by processes that ended on the page
        stopped = 0
        while True:
            left = [i for i in applying if i not in done]
            cpu = PAGE_SECONDS - _KILL_COST * stopped
            if not left or cpu <= 0:
                done.update({i: (None, spent_message()) for i in left})
                break
            request = {
                "url": url,
                "content_type": content_type,
                "skip": sorted([*skip, *done]),
                "cpu": cpu,
            }
            try:
                done.update(self._ask(request, body, deadline))
                break
            except _Ended as ended:
                done.update(ended.finished)
                if ended.running not in left or ended.running in ended.finished:
                    # Nothing says which rule it was: every rule not run says why.
                    done.update({i: (None, f"not run: {ended.why}") for i in left if i not in done})
                    break
                done[ended.running] = (None, ended.rule_error)
                stopped += 1
                log.info("rule %s stopped on %s: %s", names[ended.running], url, ended.why)
                if ended.timed_out:
                    others = f"not run: this page's rules were stopped after {self.deadline:g} s"
                    done.update({i: (None, others) for i in left if i not in done})
                    break
        return {index: done.get(index, (None, "not run: no answer for it")) for index in applying}

    def _ask(self, request: dict, body: bytes, deadline: float) -> dict[int, Outcome]:
        """What the process found on one page, by rule; _Ended when it ended (or was killed)
        instead."""
        if self._process is None:
            try:
                self._journal = self._journal or Journal.create()
                self._process = _Process.start(self._rules, self._journal.fd)
            except OSError as exc:
                raise _Ended(Journal.NONE, {}, f"their process did not start ({exc})") from None
            except _Gone as gone:
                why = "did not start in time" if gone.timed_out else "ended as it started"
                raise _Ended(Journal.NONE, {}, f"their process {why}") from None
            deadline = max(deadline, time.monotonic() + self.deadline)
        process = self._process
        self._journal.clear()
        try:
            answer = process.ask(request, body, deadline)
        except _Gone as gone:
            self._process = None
            process.end()
            running, finished = self._journal.read()
            raise _Ended.of(
                running, finished, process, timed_out=gone.timed_out, seconds=self.deadline
            ) from None
        if answer is None:  # all in the journal
            return self._journal.read()[1]
        found = {}
        for index, name in enumerate(self._local.names):
            if name in answer["fields"]:
                found[index] = (answer["fields"][name], answer["errors"].get(name))
        return found


class _Gone(Exception):
    """The process stopped answering: it ended, or the deadline passed (timed_out)."""

    def __init__(self, *, timed_out: bool) -> None:
        super().__init__()
        self.timed_out = timed_out


class _Ended(Exception):
    """The process ended on a page: the rule it was running and the outcomes of those it
    finished (its journal), why it ended (for the rules it did not run) and what that means
    for the rule it was running."""

    def __init__(
        self,
        running: int,
        finished: dict[int, Outcome],
        why: str,
        *,
        rule_error: str = "",
        timed_out: bool = False,
    ) -> None:
        super().__init__(why)
        self.running, self.finished, self.why, self.timed_out = running, finished, why, timed_out
        self.rule_error = rule_error or why

    @classmethod
    def of(
        cls,
        running: int,
        finished: dict[int, Outcome],
        process: _Process,
        *,
        timed_out: bool,
        seconds: float,
    ) -> _Ended:
        if timed_out:
            took = f"the rule took too long: over {seconds:g} s on this page; it was stopped"
            return cls(
                running,
                finished,
                f"this page's rules were stopped after {seconds:g} s",
                rule_error=took,
                timed_out=True,
            )
        code = process.popen.returncode
        if code == -signal.SIGXCPU:
            return cls(
                running,
                finished,
                "their process was stopped (a rule took too long)",
                rule_error=cpu_message(RULE_SECONDS),
            )
        how = f"killed by {_signal_name(-code)}" if code < 0 else f"exit code {code}"
        return cls(
            running,
            finished,
            f"their process ended ({how})",
            rule_error=f"the process running this rule ended on this page ({how})",
        )


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


class _Process:
    """One rule process, from the parent's side: frames written and read within a deadline."""

    def __init__(self, popen: subprocess.Popen, rules: list[dict]) -> None:
        self.popen = popen
        self._in = popen.stdin.fileno()
        self._out = popen.stdout.fileno()
        os.set_blocking(self._in, False)  # so that a write waits no longer than the deadline
        self._buffer = bytearray()
        self._rules: bytes | None = json.dumps(rules).encode()  # sent with the first page

    @classmethod
    def start(cls, rules: list[dict], journal_fd: int) -> _Process:
        popen = subprocess.Popen(
            [sys.executable, "-m", "crawls.engine.rule_process", str(journal_fd)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=_ROOT,
            pass_fds=(journal_fd,),
        )
        process = cls(popen, rules)
        try:
            if process._read(len(READY), time.monotonic() + START_SECONDS) != READY:
                raise process._gone(timed_out=True)
        except _Gone:
            process.end()
            raise
        return process

    def ask(self, request: dict, body: bytes, deadline: float) -> dict | None:
        """The page's answer: None when it is all in the journal, else its fields and errors."""
        frames = [json.dumps(request).encode(), body]
        if self._rules is not None:
            frames.insert(0, self._rules)
            self._rules = None
        # In one write: each write can wake the process, and a page is a few microseconds.
        self._write(
            [part for frame in frames for part in (FRAME.pack(len(frame)), frame)], deadline
        )
        length = FRAME.unpack(self._read(FRAME.size, deadline))[0]
        return json.loads(self._read(length, deadline)) if length else None

    def end(self) -> None:
        """Close its stdin (it exits once it has read to the end), kill it if it lingers, and
        reap it."""
        for pipe in (self.popen.stdin, self.popen.stdout):
            with contextlib.suppress(OSError):  # a write cut short: the process goes anyway
                pipe.close()
        try:
            self.popen.wait(timeout=1)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()

    def _write(self, parts: list[bytes], deadline: float) -> None:
        views = [memoryview(part) for part in parts if part]
        while views:
            try:
                written = os.writev(self._in, views)
            except BlockingIOError:  # the pipe is full: the process reads a large body
                self._wait(self._in, select.POLLOUT, deadline)
                continue
            except BrokenPipeError:
                raise self._gone(timed_out=False) from None
            while written and written >= len(views[0]):
                written -= len(views.pop(0))
            if written:
                views[0] = views[0][written:]

    def _read(self, size: int, deadline: float) -> bytes:
        while len(self._buffer) < size:
            self._wait(self._out, select.POLLIN, deadline)
            chunk = os.read(self._out, max(size - len(self._buffer), 65536))
            if not chunk:
                raise self._gone(timed_out=False)
            self._buffer += chunk
        data = bytes(self._buffer[:size])
        del self._buffer[:size]
        return data

    def _wait(self, fd: int, event: int, deadline: float) -> None:
        poll = select.poll()
        poll.register(fd, event)
        while not poll.poll(max(0, math.ceil((deadline - time.monotonic()) * 1000))):
            if time.monotonic() >= deadline:
                raise self._gone(timed_out=True)

    def _gone(self, *, timed_out: bool) -> _Gone:
        """Ended, or killed now (the deadline): reaped either way, its exit code known."""
        if timed_out:
            self.popen.kill()
        self.popen.wait()
        return _Gone(timed_out=timed_out)
