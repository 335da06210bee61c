"""The ``--ray`` address: what ``auto`` stands for, its parse, and whether its head answers.

Used by config validation (a malformed address is one line before any process starts), by the
supervisor (before any segment) and by the bridge process (before ``ray.init``). Nothing here imports
ray: these are plain strings and one TCP connection (a connect and a greeting).
"""

from __future__ import annotations

import os
import typing

from spreeze_like.errors import ConfigError

RAY_DEFAULT_PORT = 6379  # what ``ray start --head`` listens on unless told otherwise
RAY_ADDRESS_VAR = "RAY_ADDRESS"  # Ray's own variable for the cluster to connect to
ANSWER_S = 5.0  # the head's GCS port must accept a connection, then answer the greeting, within this each


def resolve_ray_address(value: str, environ: typing.Mapping[str, str] | None = None) -> str:
    """``--ray``'s value as ``host:port``: ``auto`` is ``$RAY_ADDRESS``, else ``127.0.0.1:6379``."""
    environ = os.environ if environ is None else environ
    if value.strip().lower() != "auto":
        return value.strip()
    found = environ.get(RAY_ADDRESS_VAR, "").strip()
    if found and found.lower() != "auto":
        return found
    return f"127.0.0.1:{RAY_DEFAULT_PORT}"


def parse_ray_address(value: str, environ: typing.Mapping[str, str] | None = None) -> tuple[str, int]:
    """(host, port) of ``--ray``'s value (after :func:`resolve_ray_address`); a one-line ConfigError if malformed.

    A ``ray://`` or ``http://`` prefix is dropped (the host and port are what a connection needs); an
    IPv6 host is written in brackets, ``[::1]:6379``.
    """
    address = resolve_ray_address(value, environ)
    rest = address.split("://", 1)[-1].rstrip("/")
    host, sep, port = rest.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        where = "" if address == value else f" (from {RAY_ADDRESS_VAR}={address!r})"
        raise ConfigError(f"--ray {value!r} is invalid{where}: give host:port of the Ray head's GCS, e.g. "
                          f"127.0.0.1:{RAY_DEFAULT_PORT}, or auto")
    return host, int(port)


# An HTTP/2 client's opening (RFC 9113 section 3.4: the preface, then an empty SETTINGS frame). A Ray head's
# GCS is a gRPC server and answers with its own SETTINGS frame at once (0.2 ms measured here, Ray 2.60). A
# server that rejects the greeting (closes, resets, or replies in its own protocol) has answered too: ray.init
# then says what it is. A port that accepts and says nothing (a service waiting for its own client's first
# words, a wrong port) would keep ray.init retrying for minutes.
HTTP2_GREETING = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def unanswered_reason(host: str, port: int, timeout_s: float) -> str | None:
    """Why ``host:port`` is no Ray head to try, or None: it accepts a TCP connection and answers a greeting.

    Within ``timeout_s`` each, the port must accept a connection, then send any byte (or close) after
    :data:`HTTP2_GREETING`. The ``--ray`` checks of the supervisor (before any segment) and of the bridge
    (before ``ray.init``) both ask this; the reason goes into their one error line.
    """
    import socket

    try:
        conn = socket.create_connection((host, port), timeout=timeout_s)
    except OSError as exc:
        return "timed out" if isinstance(exc, TimeoutError) else (exc.strerror or type(exc).__name__)
    with conn:
        try:
            conn.sendall(HTTP2_GREETING)
            conn.recv(1)  # bytes, or b"" when it closed: either way something speaks there
        except TimeoutError:
            return "it accepted a connection but sent nothing back to an HTTP/2 greeting"
        except OSError:  # reset: a server that rejected the greeting answered, and ray.init will say what it is
            pass
    return None
