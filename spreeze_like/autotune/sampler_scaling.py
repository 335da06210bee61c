"""Sampler scaling: total env steps/s of N sampler processes with K envs each, all stepping at once.

One sampler process is measured by :mod:`spreeze_like.autotune.env_probe`; this module measures
what a run with many of them gets, where the cores, the memory bus and hyperthread siblings are
shared. Each process runs the real sampler loop of a run: a
:class:`~spreeze_like.roles.sampler.SamplerWorker` with K envs, its numpy policy loaded from a
published vector (random weights: a forward pass costs the same whatever the values), one batched
inference for its K envs per step, rows packed and checked for non-finite values, then handed to a
sink that drops them (the ring's cost is probed on its own). Like a run's sampler process it never
imports torch and runs numpy with one BLAS thread (``child_environment``).

Who owns what: :func:`measure_scaling` spawns the pool (the largest N of the curve, ``spawn``
context, each dying with its parent through ``child_setup``), drives it through pipes and joins
every worker -- or kills it -- before it returns, error or not. Nothing shared is created. A
worker that raises sends its traceback and the call raises :class:`SamplerScalingError`.

A point (N, K): the first N workers build K envs each and warm up (not timed); then all N are sent
one start time and step until start + ``seconds``; the point is the sum of their rates.
:func:`sampler_counts` chooses the N to measure for a machine. Used by the probe
(:mod:`spreeze_like.autotune.probe`, results in ``EnvRates.parallel``) and by
``tools/bench_sampler.py``.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from spreeze_like.autotune.results import Rate

READY_TIMEOUT_S = 120.0  # building 16 MuJoCo envs and warming up on a loaded machine takes seconds, not minutes
START_LEAD_S = 0.05  # the start time sent to the workers lies this far ahead, so that all of them see it in time
MIN_STEPS_PER_PROCESS = 20  # fewer timed steps than this per process: the figure is marked as an estimate


class SamplerScalingError(RuntimeError):
    """A scaling worker failed (its traceback or exit status is the message)."""


class _DropSink:
    def write(self, rows: Any) -> None:
        pass


def _worker_main(parent_pid: int, conn: Any, index: int, env_id: str, spec_fields: dict[str, Any],
                 env_kwargs: dict[str, Any] | None = None) -> None:
    from spreeze_like.ipc import child_setup

    child_setup(parent_pid)
    sampler = None
    try:
        import numpy as np

        from spreeze_like.algos.numpy_policy import NumpyPolicy
        from spreeze_like.algos.spec import AlgoSpec
        from spreeze_like.metrics import stats_schema
        from spreeze_like.roles.ports import LocalBoard, LocalStatsBlock
        from spreeze_like.roles.sampler import SamplerWorker

        spec = AlgoSpec(**spec_fields)
        size = NumpyPolicy(spec).size
        board = LocalBoard()
        board.publish((0.05 * np.random.default_rng(index).standard_normal(size)).astype(np.float32))
        stats = LocalStatsBlock(stats_schema(1)).role("sampler-0")
        k_built = 0
        while True:
            msg = conn.recv()
            if msg[0] == "stop":
                break
            if msg[0] == "prepare":
                k = int(msg[1])
                if k != k_built:
                    if sampler is not None:
                        sampler.close()
                    sampler = SamplerWorker(env_id, spec, index, k, 0, _DropSink(), board, stats, env_kwargs=env_kwargs)
                    k_built = k
                    for _ in range(max(3, 64 // k)):  # first forwards and allocations: not timed
                        sampler.step()
                    if sampler.version == 0:  # it would be timing random actions, not policy inference
                        raise RuntimeError("the sampler did not load the published policy")
                conn.send(("ready", index))
            elif msg[0] == "run":
                start, seconds = float(msg[1]), float(msg[2])
                while time.time() < start:
                    pass  # a few tens of ms: spinning keeps every worker's start within microseconds
                steps = 0
                end = start + seconds
                while True:
                    sampler.step()
                    steps += k_built
                    now = time.time()
                    if now >= end:
                        break
                conn.send(("done", steps, now - start))
    except BaseException:  # noqa: BLE001 - the parent decides; it needs the traceback
        try:
            conn.send(("error", traceback.format_exc()))
        except OSError:
            pass
    finally:
        if sampler is not None:
            sampler.close()
        conn.close()


def sampler_counts(limit: int) -> list[int]:
    """Process counts to measure up to ``limit``: the powers of two below it, and ``limit`` itself."""
    counts, n = [], 1
    while n < limit:
        counts.append(n)
        n *= 2
    return [*counts, max(1, limit)]


def _recv(conn: Any, proc: Any, timeout_s: float, what: str) -> tuple:
    deadline = time.monotonic() + timeout_s
    while not conn.poll(0.2):
        if not proc.is_alive():
            raise SamplerScalingError(f"scaling worker {proc.name} died (exit code {proc.exitcode}) while {what}")
        if time.monotonic() > deadline:
            raise SamplerScalingError(f"scaling worker {proc.name} did not answer within {timeout_s:.0f} s "
                                      f"while {what}")
    try:
        msg = conn.recv()
    except (EOFError, OSError) as exc:  # the worker's end closed: it died
        proc.join(1.0)
        raise SamplerScalingError(f"scaling worker {proc.name} died (exit code {proc.exitcode}) while {what}") from exc
    if msg[0] == "error":
        raise SamplerScalingError(f"scaling worker {proc.name} failed while {what}:\n{msg[1]}")
    return msg


def measure_scaling(
    env_id: str,
    spec_fields: dict[str, Any],
    processes: Sequence[int],
    envs_per_sampler: Sequence[int],
    seconds: float,
    progress: Callable[[str], None] | None = None,
    env_kwargs: Mapping[str, Any] | None = None,
) -> dict[int, dict[int, Rate]]:
    """Total env steps/s for every (N processes, K envs each); ``{N: {K: Rate}}``.

    Args:
        env_id: gymnasium id or ``module:EnvId``.
        spec_fields: :class:`~spreeze_like.algos.spec.AlgoSpec` arguments (algo, obs_dim, act_dim,
            hidden_sizes): the policy every sampler runs.
        processes: the N to measure (each >= 1).
        envs_per_sampler: the K to measure (each >= 1).
        seconds: timed window per point (building envs and warming up come on top).
        progress: receives one line per point.
        env_kwargs: the run's ``--env-kwargs`` for ``gymnasium.make``.

    Raises:
        SamplerScalingError: a worker raised, died or hung.
    """
    from spreeze_like.ipc import child_setup as _  # noqa: F401 - fail here, not in the children, if ipc is broken
    from spreeze_like.procs.children import child_environment

    counts = sorted({int(n) for n in processes})
    ks = sorted({int(k) for k in envs_per_sampler})
    if not counts or counts[0] < 1 or not ks or ks[0] < 1:
        raise ValueError("processes and envs_per_sampler need whole numbers >= 1")
    ctx = mp.get_context("spawn")
    pipes, procs = [], []
    out: dict[int, dict[int, Rate]] = {n: {} for n in counts}
    try:
        with child_environment():  # one BLAS thread, as in a run's sampler processes
            for i in range(counts[-1]):
                parent_end, child_end = ctx.Pipe()
                proc = ctx.Process(target=_worker_main, args=(os.getpid(), child_end, i, env_id, spec_fields,
                                                              dict(env_kwargs or {})),
                                   name=f"spz-scaling-{i}", daemon=True)
                proc.start()
                child_end.close()
                pipes.append(parent_end)
                procs.append(proc)
        for k in ks:
            for n in counts:
                for i in range(n):
                    pipes[i].send(("prepare", k))
                for i in range(n):
                    _recv(pipes[i], procs[i], READY_TIMEOUT_S, f"building {k} env(s)")
                start = time.time() + START_LEAD_S
                for i in range(n):
                    pipes[i].send(("run", start, seconds))
                done = [_recv(pipes[i], procs[i], seconds + READY_TIMEOUT_S, "stepping") for i in range(n)]
                steps = sum(d[1] for d in done)
                total = sum(d[1] / d[2] for d in done)
                estimate = ""
                if steps < MIN_STEPS_PER_PROCESS * n:
                    estimate = (f"only {steps} steps in {n} process(es) fit in {seconds:.2g} s; give the probe "
                                "more time")
                out[n][k] = Rate(total, "steps/s", steps, max(d[2] for d in done), estimate)
                if progress is not None:
                    progress(f"{n} sampler process(es) x {k} env(s) each, all at once: {out[n][k].text()} "
                             f"({total / n:,.0f}/s per process)")
    finally:
        for pipe, proc in zip(pipes, procs, strict=True):
            if proc.is_alive():
                try:
                    pipe.send(("stop",))
                except OSError:
                    pass
        for proc in procs:
            proc.join(5.0)
            if proc.is_alive():
                proc.kill()
                proc.join(5.0)
        for pipe in pipes:
            pipe.close()
    return out
