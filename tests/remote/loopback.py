"""Loopback TCP ports for the ``--ray`` address checks: servers that answer like a gRPC server, close, or
accept and never say a word (each lives for a ``with`` block), and a port that refuses. 127.0.0.1 only."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

# What a gRPC server (a Ray GCS) sends first: an HTTP/2 SETTINGS frame, here an empty one (RFC 9113 6.5).
SETTINGS_FRAME = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def refusing_port() -> int:
    """A loopback port nothing listens on (bound, then closed: the kernel refuses connections to it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def loopback_server(reply: bytes | None) -> Iterator[int]:
    """Yields the port of a server that, per connection, reads what comes and sends ``reply`` (``b""``: closes
    at once, unread); ``None``: a listening socket that is never accepted from (the kernel completes the
    handshake, nothing answers)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        if reply is None:
            yield server.getsockname()[1]
            return
        server.settimeout(0.1)
        stop = threading.Event()

        def serve() -> None:
            while not stop.is_set():
                try:
                    conn, _ = server.accept()
                except TimeoutError:
                    continue
                with conn:
                    if reply:
                        conn.settimeout(5)
                        with contextlib.suppress(OSError):
                            conn.recv(64)
                            conn.sendall(reply)

        thread = threading.Thread(target=serve, name="loopback-server", daemon=True)
        thread.start()
        try:
            yield server.getsockname()[1]
        finally:
            stop.set()
            thread.join(5)
