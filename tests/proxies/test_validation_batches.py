"""A validation pass over more proxies than PROXY_VALIDATE_BATCH: every proxy is checked, through
itself, batch by batch (never more checks at once than a batch holds)."""

from __future__ import annotations

import threading
import time
from contextlib import ExitStack

import pytest

from proxies import pool, validation
from proxies.models import ProxyState
from tests.support.forward_proxy import ForwardProxy
from tests.support.proxy_checks import add_proxy, echo_handler
from tests.support.sites import Request, Response

pytestmark = pytest.mark.django_db

BATCH = 3
PROXIES = 7  # three batches: 3, 3 and 1
CHECK_SECONDS = 0.4  # long enough for the checks of one batch to overlap at the echo site


@pytest.mark.slow
def test_a_pass_validates_every_proxy_in_batches(make_site, settings):
    in_flight, most, lock = 0, 0, threading.Lock()

    def slow_echo(request: Request) -> Response:
        nonlocal in_flight, most
        with lock:
            in_flight += 1
            most = max(most, in_flight)
        time.sleep(CHECK_SECONDS)
        with lock:
            in_flight -= 1
        return echo_handler(request)

    site = make_site(slow_echo)
    settings.PROXY_CHECK_URL = site.url + "/proxies/echo"
    settings.PROXY_CHECK_TIMEOUT = 5
    settings.PROXY_VALIDATE_BATCH = BATCH
    with ExitStack() as stack:
        forwards = [stack.enter_context(ForwardProxy()) for _ in range(PROXIES)]
        proxies = [add_proxy(fp.url) for fp in forwards]
        report = validation.run_pass()
    assert (report.checked, report.ok, report.admitted) == (PROXIES, PROXIES, PROXIES)
    for fp, proxy in zip(forwards, proxies, strict=True):
        proxy.refresh_from_db()
        assert proxy.state == ProxyState.ACTIVE, f"{proxy} was not admitted"
        assert proxy.last_validated_at is not None and proxy.successes == 1
        assert len(fp.relays) == 1, f"{proxy} relayed {len(fp.relays)} checks, not 1"
    assert set(pool.members()) == {p.key for p in proxies}
    # Batches ran one after another, each with its checks side by side.
    assert 1 < most <= BATCH, f"{most} checks ran at once; the batch size is {BATCH}"
