"""The RQ worker every crawlhub worker runs (settings.RQ["WORKER_CLASS"]: `up`'s workers and
`./run worker` on other machines): RQ's own, made to wait out a Redis that went away and
to take its work horse with it when it dies; the scheduler process the worker started with
--with-scheduler forks (delayed jobs: webhook retries), made to carry on after a Redis error;
and the cron scheduler `up` runs (`manage.py cron`), made to wait alike instead of exiting.

RQ 3 retries only its wait for the next job. A heartbeat sent while it watches a work horse,
or the bookkeeping after a job, raises ConnectionError when Redis is away and the worker
exits, leaving its horse to run on alone (the horse is in a process group of its own).
Here every Redis command of the worker, and of the horse it forks (which shares the
connection), is retried about once a second for up to REDIS_WAIT_SECONDS, until the worker is
asked to stop (a stopping worker waits for nothing: Redis may be gone for good); and the horse
gets SIGKILL from the kernel when its worker dies, however it died. Its claimed requests come
back when their leases run out, as after any kill.
"""

from __future__ import annotations

import ctypes
import importlib
import logging
import math
import os
import signal
import socket
import threading
import time
from contextlib import suppress

from django.conf import settings
from django_rq.cron import DjangoCronScheduler
from redis import Redis
from redis.backoff import ExponentialBackoff
from redis.exceptions import RedisError
from redis.retry import Retry
from rq import Worker as RQWorker
from rq.defaults import DEFAULT_LOGGING_DATE_FORMAT, DEFAULT_LOGGING_FORMAT
from rq.scheduler import RQScheduler

from crawlhub.redis.connections import get_redis

log = logging.getLogger(__name__)

# As long as a slice waits for Redis (crawls.engine.stopping.REDIS_RETRY_SECONDS).
REDIS_WAIT_SECONDS = 300.0
# Once Redis is back, a waiting worker sees it within this long.
REDIS_POLL_SECONDS = 1.0
_FIRST_WAIT_SECONDS = 0.05
_PR_SET_PDEATHSIG = 1

# Set once this process was asked to stop. Not a Retry attribute: redis-py gives each
# connection its own copy of the policy.
_stopping = threading.Event()


class _WaitingRetry(Retry):
    """Retry, unless this process is stopping: then Redis being away is an error at once."""

    def call_with_retry(self, do, fail, is_retryable=None, with_failure_count=False):
        def retryable(error: Exception) -> bool:
            return not _stopping.is_set() and (is_retryable is None or is_retryable(error))

        return super().call_with_retry(do, fail, retryable, with_failure_count)


def waiting_retry(seconds: float = REDIS_WAIT_SECONDS) -> Retry:
    """A redis-py retry policy that keeps trying a command for about `seconds` seconds:
    0.1 s, 0.2 s, 0.4 s... then once every REDIS_POLL_SECONDS (connection refused or reset,
    timeouts, and a Redis still loading its data, which is a ConnectionError too)."""
    backoff = ExponentialBackoff(cap=REDIS_POLL_SECONDS, base=_FIRST_WAIT_SECONDS)
    doubling = math.ceil(math.log2(REDIS_POLL_SECONDS / _FIRST_WAIT_SECONDS))
    ramp = sum(backoff.compute(n) for n in range(1, doubling + 1))
    retries = doubling + max(0, math.ceil((seconds - ramp) / REDIS_POLL_SECONDS))
    return _WaitingRetry(backoff, retries)


def _die_with_parent(parent: int) -> None:
    """In a work horse: SIGKILL from the kernel when the worker that forked it ends."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        return
    if os.getppid() != parent:  # the worker died before the line above: nobody watches us
        os._exit(1)


def forget_worker(pid: int) -> None:
    """Remove the registration of this machine's RQ worker `pid`, which ended without its
    goodbye (killed by `up` or `worker` when it did not stop in time, or died): otherwise
    /healthz and the Workers page count it until its registration expires, minutes later.
    Nothing to do when Redis is away: the expiry ends it then."""
    host = socket.gethostname()
    try:
        for worker in RQWorker.all(connection=get_redis()):
            if worker.pid == pid and worker.hostname == host:
                worker.register_death()
                log.info(
                    "worker %s (pid %d) ended without a goodbye: unregistered", worker.name, pid
                )
    except RedisError as exc:
        log.info("worker pid %d left registered (%s): it expires", pid, exc)


class Worker(RQWorker):
    """rq.Worker, waiting for Redis instead of exiting, with horses that die with it."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        connections: list[Redis] = [self.connection, *(queue.connection for queue in self.queues)]
        for connection in connections:
            connection.set_retry(waiting_retry())

    def work(self, *args, **kwargs) -> bool:
        """RQ's, once the modules of settings.WORKER_PRELOAD are imported: every work horse is
        a fork of this process, and starts with them."""
        for name in getattr(settings, "WORKER_PRELOAD", ()):
            importlib.import_module(name)
        return super().work(*args, **kwargs)

    def request_stop(self, signum, frame) -> None:
        # RQ records a warm shutdown in Redis from this signal handler: with Redis away, that
        # must fail at once instead of holding the handler for minutes.
        _stopping.set()
        super().request_stop(signum, frame)

    def handle_warm_shutdown_request(self) -> None:
        """SIGTERM (`up` or `worker` stopping): the job in progress is told too. A crawl slice
        then finishes the pages it is fetching and hands the rest of its requests back
        (crawls.engine.stopping.stop_on_sigterm), instead of crawling out its time budget."""
        super().handle_warm_shutdown_request()
        if self.horse_pid:
            with suppress(ProcessLookupError):
                os.kill(self.horse_pid, signal.SIGTERM)

    def setup_work_horse_signals(self) -> None:
        # A job that says nothing about SIGTERM runs to its end through a warm shutdown, as
        # before; a slice sets its own handler.
        super().setup_work_horse_signals()
        signal.signal(signal.SIGTERM, signal.SIG_IGN)

    def _start_scheduler(
        self,
        burst: bool = False,
        logging_level: str | None = "INFO",
        date_format: str = DEFAULT_LOGGING_DATE_FORMAT,
        log_format: str = DEFAULT_LOGGING_FORMAT,
    ) -> None:
        """RQ's own (rq.worker.base), with Scheduler for RQScheduler."""
        self.scheduler = Scheduler(
            self.queues,
            connection=self.connection,
            logging_level=logging_level if logging_level is not None else self.log.level,
            date_format=date_format,
            log_format=log_format,
            serializer=self.serializer,
        )
        self.scheduler.acquire_locks()
        if not self.scheduler.acquired_locks:
            return
        if not burst:
            self.scheduler.start()
            return
        try:
            self.scheduler.register_birth()
            self.scheduler.enqueue_scheduled_jobs()
        finally:
            self.scheduler.release_locks()
            self.scheduler.register_death()

    def fork_work_horse(self, job, queue) -> None:
        self._forked_by = os.getpid()
        super().fork_work_horse(job, queue)

    def main_work_horse(self, job, queue) -> None:
        _die_with_parent(self._forked_by)
        super().main_work_horse(job, queue)


class Scheduler(RQScheduler):
    """RQ's scheduler process, carrying on after a Redis error. RQ's ends on the first one that
    its connection's retries do not cover, and its worker sees that only at its next
    maintenance, ten minutes later: meanwhile no delayed job is enqueued and the dead process
    is a zombie. One such error is sure after a Redis restart that lands between a pipeline's
    script check and its execution: the retried pipeline finds the new server without the
    script (NoScriptError)."""

    def work(self) -> None:
        while True:
            try:
                super().work()
                return
            except RedisError as error:
                if self._stop_requested or _stopping.is_set():
                    raise
                self.log.warning(
                    "Scheduler: Redis failed (%s: %s); going on in %.0f s",
                    type(error).__name__,
                    error,
                    REDIS_POLL_SECONDS,
                )
                time.sleep(REDIS_POLL_SECONDS)

    def request_stop(self, signum=None, frame=None) -> None:
        _stopping.set()  # its goodbye to Redis (releasing its locks) waits for nothing
        super().request_stop(signum, frame)


class CronScheduler(DjangoCronScheduler):
    """django-rq's cron scheduler, waiting for Redis as the workers do. RQ's exits on the first
    ConnectionError: under `up` it was started again, but a Django start later (seconds on a
    busy machine), and meanwhile no supervisor pass recovered leases or replaced slices."""

    def start(self) -> None:
        self.connection.set_retry(waiting_retry())
        super().start()

    def _request_stop(self, signum, frame) -> None:
        _stopping.set()  # its goodbye to Redis (register_death) waits for nothing
        super()._request_stop(signum, frame)
