"""The ``--ray`` address check without Ray: a port must accept a connection and answer an HTTP/2 greeting
(a Ray head's GCS is a gRPC server), else the reason goes into the one error line."""

from __future__ import annotations

import time

from spreeze_like.remote.address import HTTP2_GREETING, unanswered_reason
from tests.remote.loopback import SETTINGS_FRAME, loopback_server, refusing_port


def test_a_port_that_answers_the_greeting_passes() -> None:
    with loopback_server(SETTINGS_FRAME) as port:
        assert unanswered_reason("127.0.0.1", port, 2.0) is None


def test_a_port_that_closes_has_answered() -> None:
    # a server of another protocol (or a TLS head) that drops the greeting: ray.init is left to say what it is
    with loopback_server(b"") as port:
        assert unanswered_reason("127.0.0.1", port, 2.0) is None


def test_a_port_that_accepts_and_stays_silent_fails_after_the_limit() -> None:
    with loopback_server(None) as port:
        t0 = time.monotonic()
        why = unanswered_reason("127.0.0.1", port, 0.5)
        took = time.monotonic() - t0
    assert why == "it accepted a connection but sent nothing back to an HTTP/2 greeting"
    assert 0.4 < took < 3.0, took  # waited for the answer, and not much past the limit


def test_a_port_that_refuses_says_so() -> None:
    assert unanswered_reason("127.0.0.1", refusing_port(), 2.0) == "Connection refused"


def test_the_greeting_is_an_http2_preface_then_an_empty_settings_frame() -> None:
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"  # RFC 9113 section 3.4
    assert HTTP2_GREETING[:len(preface)] == preface
    assert HTTP2_GREETING[len(preface):] == SETTINGS_FRAME  # length 0, type 4 (SETTINGS), no flags, stream 0
