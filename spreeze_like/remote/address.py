"""The ``--ray`` address: what ``auto`` stands for, its parse, and whether its head answers.

Used by config validation (a malformed address is one line before any process starts), by the
supervisor (before any segment) and by the bridge process (before ``ray.init``). Nothing here imports
ray: these are plain strings and one TCP connect.
"""

from __future__ import annotations

import os
import typing

from spreeze_like.errors import ConfigError

RAY_DEFAULT_PORT = 6379  # what ``ray start --head`` listens on unless told otherwise
RAY_ADDRESS_VAR = "RAY_ADDRESS"  # Ray's own variable for the cluster to connect to


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


def unreachable_reason(host: str, port: int, timeout_s: float) -> str | None:
    """Why ``host:port`` did not accept a TCP connection within ``timeout_s``, or None if it did.

    The ``--ray`` checks of the supervisor (before any segment) and of the bridge (before ``ray.init``,
    which would retry for minutes against a head that is gone) both ask this.
    """
    import socket

    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return None
    except OSError as exc:
        return "timed out" if isinstance(exc, TimeoutError) else (exc.strerror or type(exc).__name__)
