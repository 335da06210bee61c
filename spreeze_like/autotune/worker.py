"""The probe worker: one spawned process that runs the env and update probes and reports back.

Why a separate process: the update probes initialise CUDA on every GPU they measure and set torch's
thread count; doing that in the caller (the supervisor, before it spawns the learners) would pin
CUDA contexts and change its threads for good. The worker is started with ``spawn`` by
:func:`run_worker`, dies with its parent (``child_setup``: PR_SET_PDEATHSIG, SIGINT ignored) and is
joined, or killed after a hard deadline, before :func:`run_worker` returns. It creates nothing
shared; messages travel through a ``multiprocessing`` queue:

``("progress", line)``, ``("env", EnvRates as dict)``, ``("curve", UpdateCurve as dict)``,
``("error", traceback text)``, and a final ``("done", None)``.
"""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import os
import queue as queue_mod
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from spreeze_like.autotune.results import EnvRates, UpdateCurve, _build
from spreeze_like.procs.children import child_environment


@dataclass(frozen=True)
class CurveJob:
    """One update curve to measure."""

    device: str
    threads: int
    budget_s: float
    max_batch: int
    memory_total: int = 0  # bytes (CUDA devices), for the projected-peak stop
    precision: str = "fp32"  # what a run's ``--precision auto`` resolves to on this device


class ProbeWorkerError(RuntimeError):
    """The worker process failed (its traceback is the message)."""


def _worker_main(parent_pid: int, out: Any, env_id: str, spec_fields: dict[str, Any], env_budget_s: float,
                 jobs: list[CurveJob], env_kwargs: dict[str, Any] | None = None) -> None:
    from spreeze_like.ipc import child_setup

    child_setup(parent_pid)
    try:
        from spreeze_like.algos.base import AlgoSpec
        from spreeze_like.autotune.env_probe import probe_env
        from spreeze_like.autotune.update_probe import probe_updates

        def progress(line: str) -> None:
            out.put(("progress", line))

        spec = AlgoSpec(**spec_fields)
        env = probe_env(env_id, spec, env_budget_s, progress, env_kwargs=env_kwargs)
        out.put(("env", dataclasses.asdict(env)))
        for job in jobs:
            curve = probe_updates(dataclasses.replace(spec, precision=job.precision), job.device, job.threads, job.budget_s, progress, job.max_batch,
                                  job.memory_total)
            out.put(("curve", dataclasses.asdict(curve)))
    except BaseException:  # noqa: BLE001 - everything goes back to the parent, which decides
        out.put(("error", traceback.format_exc()))
    finally:
        out.put(("done", None))


def run_worker(
    env_id: str,
    spec_fields: dict[str, Any],
    env_budget_s: float,
    jobs: list[CurveJob],
    progress: Callable[[str], None],
    hard_timeout_s: float,
    env_kwargs: dict[str, Any] | None = None,
) -> tuple[EnvRates, list[UpdateCurve]]:
    """Run the env probe and every curve job in a spawned worker; relay its progress lines.

    ``spec_fields`` are the :class:`~spreeze_like.algos.base.AlgoSpec` arguments: the worker builds
    the spec itself, so this process never imports torch.

    Raises:
        ProbeWorkerError: the worker raised, died, or ran past ``hard_timeout_s``.
    """
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    proc = ctx.Process(target=_worker_main, args=(os.getpid(), out, env_id, spec_fields, env_budget_s, jobs,
                                                  dict(env_kwargs or {})),
                       name="spz-probe-worker", daemon=True)
    env: EnvRates | None = None
    curves: list[UpdateCurve] = []
    error = ""
    deadline = time.monotonic() + hard_timeout_s
    try:
        with child_environment():  # numpy's BLAS threads as in a sampler process, so the env probe measures that
            proc.start()
        while True:
            try:
                kind, payload = out.get(timeout=0.5)
            except queue_mod.Empty:
                if not proc.is_alive():
                    error = error or f"probe worker died (exit code {proc.exitcode}) without reporting"
                    break
                if time.monotonic() > deadline:
                    error = f"probe worker ran past its {hard_timeout_s:.0f} s deadline and was stopped"
                    break
                continue
            if kind == "progress":
                progress(payload)
            elif kind == "env":
                env = _build(EnvRates, payload)
            elif kind == "curve":
                curves.append(_build(UpdateCurve, payload))
            elif kind == "error":
                error = payload
            elif kind == "done":
                break
        proc.join(10.0)
    finally:
        if proc.is_alive():
            proc.kill()
        if proc.pid is not None:
            proc.join(5.0)
        out.close()
        out.join_thread()
    if error or env is None:
        raise ProbeWorkerError(error or "probe worker reported no env rates")
    return env, curves
