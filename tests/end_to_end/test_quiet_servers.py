"""A passing run prints no tracebacks: the tests' own servers (and the sample site crawlhub
serves) say nothing when a client hangs up before reading its answer, as crawlers do when a
crawl is cancelled or a fetch times out."""

import socket
import struct
import time

import pytest

from tests.support.sites import LocalSite, Response

pytestmark = pytest.mark.once


def hang_up_early(port: int) -> None:
    """Ask for a page, then reset the connection without reading the answer."""
    with socket.create_connection(("127.0.0.1", port)) as conn:
        conn.sendall(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    time.sleep(0.3)


def test_a_client_that_hangs_up_leaves_no_traceback(capfd):
    with LocalSite(lambda request: Response(body=b"x" * 8_000_000, delay=0.2)) as site:
        for _ in range(3):
            hang_up_early(site.port)
    err = capfd.readouterr().err
    assert "Traceback" not in err and "Exception occurred during processing" not in err, err
