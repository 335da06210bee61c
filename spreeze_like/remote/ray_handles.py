"""The bridge's :class:`~spreeze_like.remote.bridge.Cluster` over Ray: connect, actors, calls, faults.

Only the ``ray-bridge`` process uses this module, and it is the only module of the package that imports
ray (inside functions: importing it costs 0.4 s and a machine without Ray must still import the package).

- :func:`connect` joins a running cluster as a driver (never starts or stops one): ``ray.init(address=...)``
  in a namespace of this run's own, with the driver's log forwarding off. Any failure (no cluster at
  the address, another Ray version, a bad token) is one :class:`~spreeze_like.errors.SpreezeError` line.
  It then checks /dev/shm: Ray's object store on this machine maps its files there, beside our replay;
  if less space is free than the object stores of this machine's nodes may fill, a full /dev/shm would
  kill processes with SIGBUS later, so the run stops now, naming ``--object-store-memory``.
- Actors are ``ray.remote(num_cpus=1, max_restarts=0, max_task_retries=0)`` around
  :class:`SamplerActor`: Ray never restarts or retries them (a Ray restart would replay the same
  seeds); the bridge does, with its own back-off and budget. They are not detached, so Ray kills them
  when their owner, the bridge's driver, goes (a SIGKILLed supervisor takes the bridge with it through
  PDEATHSIG, and with it every actor: ``tests/remote`` and the report of issue 16 check it on a cluster).
- :meth:`RayCluster.get` turns a user error raised in an actor (a :class:`SpreezeError`, e.g. an env
  that a worker node cannot make) into that error, and lets everything else through: the bridge counts
  any other failure as the actor's death.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

from spreeze_like.errors import SpreezeError, first_line
from spreeze_like.remote.address import ANSWER_S, parse_ray_address, unanswered_reason
from spreeze_like.remote.worker import RemoteSampler

SHM_DIR = "/dev/shm"
# ray.init took 0.03-4 s here (design note). A port that answers the greeting (address.py) and still never
# completes a join would keep it retrying for minutes, so the join gets this long, then one line.
INIT_S = 20.0


class SamplerActor:
    """The actor's class: a :class:`RemoteSampler`, whose user errors surface on the first call.

    A constructor that raises makes Ray report a generic actor death; kept here, the one-line
    :class:`SpreezeError` (an env missing on that node) reaches the bridge through ``ping``.
    """

    def __init__(self, init: dict[str, Any]) -> None:
        self.error: SpreezeError | None = None
        self.sampler: RemoteSampler | None = None
        try:
            self.sampler = RemoteSampler(**init)
        except SpreezeError as exc:
            self.error = exc

    def _ready(self) -> RemoteSampler:
        if self.error is not None:
            raise self.error
        assert self.sampler is not None
        return self.sampler

    def ping(self) -> dict[str, Any]:
        return self._ready().ping()

    def collect(self, n: int, weights: np.ndarray | None, version: int) -> dict[str, Any]:
        return self._ready().collect(n, weights, version)


def connect(address: str, run_id: str, log_path: str | os.PathLike | None = None) -> Any:
    """``ray.init`` as a driver of the cluster at ``address`` (``host:port`` or ``auto``); returns ray.

    Args:
        log_path: where the cluster's error reports to this driver go (see :func:`divert_cluster_errors`).

    Raises:
        SpreezeError: the cluster cannot be joined, or /dev/shm lacks room for its object stores here.
    """
    try:
        import ray
    except ImportError:
        raise SpreezeError('--ray needs Ray: pip install "spreeze_like[ray]"') from None
    host, port = parse_ray_address(address)
    why = unanswered_reason(host, port, ANSWER_S)  # gone since the supervisor's check: ray.init would wait minutes
    if why is not None:
        raise SpreezeError(f"cannot join the Ray cluster at {address}: nothing answers at {host}:{port} ({why}, "
                           f"waited up to {ANSWER_S:.0f} s)")
    if log_path is not None:
        divert_cluster_errors(log_path)
    outcome: dict[str, BaseException | None] = {}

    def join() -> None:
        try:
            ray.init(address=address, namespace=f"spreeze-{run_id}", log_to_driver=False,
                     logging_level=logging.ERROR, configure_logging=True)
            outcome["error"] = None
        except BaseException as exc:  # noqa: BLE001 - reported below, in this process's main thread
            outcome["error"] = exc

    # In a thread, so that a join that never completes ends in one line (the thread is a daemon: the
    # process exits through os._exit after the error line, procs/control.py). Ray's C++ core writes its
    # retry warnings to fd 2 meanwhile: they go to the bridge's log, not between the run's own lines.
    thread = threading.Thread(target=join, name="ray-init", daemon=True)
    with _stderr_into(log_path):
        thread.start()
        thread.join(INIT_S)
    if thread.is_alive():
        raise SpreezeError(f"cannot join the Ray cluster at {address}: {host}:{port} answers, but no Ray join "
                           f"completed within {INIT_S:.0f} s (is it the port `ray start --head` printed?)")
    exc = outcome.get("error")
    if exc is not None:  # ConnectionError, RuntimeError (version mismatch), auth errors...
        raise SpreezeError(f"cannot join the Ray cluster at {address}: {first_line(exc)}") from None
    try:
        check_shm(ray)
    except BaseException:
        ray.shutdown()
        raise
    return ray


@contextlib.contextmanager
def _stderr_into(log_path: str | os.PathLike | None) -> Iterator[None]:
    """File descriptor 2 appends to ``log_path`` inside the block (nothing changes without a path)."""
    if log_path is None:
        yield
        return
    try:
        target = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
    except OSError:  # a full or gone run folder: Ray's lines stay on the terminal
        yield
        return
    saved = os.dup(2)
    try:
        os.dup2(target, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(target)


def divert_cluster_errors(log_path: str | os.PathLike) -> None:
    """Append the errors the cluster pushes to this driver to ``log_path`` instead of the terminal.

    A driver prints every error the GCS publishes for its job, whatever ``log_to_driver`` says: a
    killed worker raylet alone is about 30 lines (its log's tail and a state dump). The bridge
    already says what happened in one line per event (``[spreeze] remote sampler-2 ... died``), so
    Ray's text goes to the run folder. Ray's module-level ``print_to_stdstream`` is what its error
    thread calls (Ray 2.60, a private name): where it is missing, Ray prints as it always did.
    """
    from ray._private import worker as ray_worker

    if not hasattr(ray_worker, "print_to_stdstream"):
        return

    def to_file(data: dict[str, Any], ignore_prefix: bool = False) -> None:
        with contextlib.suppress(OSError), open(log_path, "a") as f:  # a full disk: the report is lost, not the run
            f.writelines(f"{line}\n" for line in data.get("lines", []))

    ray_worker.print_to_stdstream = to_file


def local_object_store_bytes(ray: Any) -> int:
    """Object store bytes of the live Ray nodes on this machine (the driver's node address)."""
    here = ray.util.get_node_ip_address()
    return int(sum(n["Resources"].get("object_store_memory", 0) for n in ray.nodes()
                   if n.get("Alive") and n.get("NodeManagerAddress") == here))


def check_shm(ray: Any, shm_dir: str = SHM_DIR) -> None:
    """Refuse to go on when /dev/shm's free space is below this machine's Ray object stores.

    Our segments exist by now (the supervisor created them), so what is free is what Ray has left.
    """
    need = local_object_store_bytes(ray)
    st = os.statvfs(shm_dir)
    free = st.f_bavail * st.f_frsize
    if free < need:
        raise SpreezeError(
            f"{shm_dir} has {free / 1e9:.2f} GB free beside this run's replay, but the Ray object store(s) on this "
            f"machine may use {need / 1e9:.2f} GB of it: restart the head with a smaller store, "
            f"`ray start --head --object-store-memory={max(0, free // 2)}`, or use a smaller --buffer-size")


class RayCluster:
    """:class:`~spreeze_like.remote.bridge.Cluster` over a connected ``ray`` (see :func:`connect`)."""

    def __init__(self, ray: Any, address: str) -> None:
        self.ray, self.address = ray, address
        self._actor_class = ray.remote(num_cpus=1, max_restarts=0, max_task_retries=0)(SamplerActor)
        self._created = 0

    def create(self, index: int, init: dict[str, Any]) -> Any:
        # Named in the run's namespace (``sampler-<i>.<n>``, n counting this bridge's actors) so that a
        # user or a test can find one with ``ray.get_actor`` and ``ray.kill`` it; the count keeps a
        # restarted actor's name free of its predecessor's, whose death Ray may not have registered yet.
        self._created += 1
        return self._actor_class.options(name=f"sampler-{index}.{self._created}").remote(init)

    def ping(self, actor: Any) -> Any:
        return actor.ping.remote()

    def collect(self, actor: Any, n: int, weights: Any, version: int) -> Any:
        return actor.collect.remote(n, weights, version)

    def put(self, vector: np.ndarray) -> Any:
        return self.ray.put(vector)

    def wait(self, futures: list[Any], timeout: float) -> list[Any]:
        ready, rest = self.ray.wait(futures, num_returns=1, timeout=timeout)
        if ready and rest:  # take every reply already there, not one per loop
            more, _ = self.ray.wait(rest, num_returns=len(rest), timeout=0)
            ready += more
        return ready

    def get(self, future: Any) -> Any:
        from ray.exceptions import RayTaskError

        try:
            return self.ray.get(future)
        except RayTaskError as exc:
            if isinstance(exc.cause, SpreezeError):
                raise exc.cause from None  # the plain error, not Ray's hybrid of it and RayTaskError
            raise

    def kill(self, actor: Any) -> None:
        with contextlib.suppress(Exception):  # already dead, or its node is gone: nothing left to kill
            self.ray.kill(actor, no_restart=True)

    def pending_placement(self, actor: Any) -> bool:
        try:
            from ray._private import state  # the GCS actor table: works without the dashboard

            return state.actors(actor_id=actor._actor_id.hex()).get("State") == "PENDING_CREATION"
        except Exception:  # noqa: BLE001 - a private API: without it the state just says "starting"
            return False

    def shutdown(self) -> None:
        self.ray.shutdown()
