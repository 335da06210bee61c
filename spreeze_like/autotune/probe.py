"""Run every probe on this machine for one env, within a time budget, with progress; cache the result.

Order and budget (``budget_s`` is the measuring time; process start-ups come on top, a few
seconds each):

=====================  ==========  ==============================================================
probe                  share       where it runs
=====================  ==========  ==============================================================
hardware facts, GPUs   (fixed)     this process (psutil, /proc) + a GPU subprocess
memcpy bandwidth       2%          this process (numpy only)
ring throughput        5%          a spawned producer -> this process, through a real Ring
env step rates         15%         the probe worker (sampler loop, numpy policy)
sampler scaling        8%          N sampler processes x K envs each at once (spawned from here,
                                   numpy only; :mod:`~spreeze_like.autotune.sampler_scaling`)
update curves          the rest    the probe worker: CPU at 1 thread, CPU at all usable cores,
                                   and each GPU; GPUs weigh twice the CPU curves when present
=====================  ==========  ==============================================================

This process never imports torch, let alone a CUDA context: GPUs are listed by a subprocess and
measured by the worker. :func:`probe_machine` runs the probes; :func:`load_or_probe` returns the cached results
for this machine and env when they exist (``reprobe=True`` refreshes them).
"""

from __future__ import annotations

import datetime as dt
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from spreeze_like.autotune import cache, hardware
from spreeze_like.autotune.env_probe import ENVS_PER_SAMPLER_OPTIONS
from spreeze_like.autotune.layout import max_samplers
from spreeze_like.autotune.measure import memcpy_rate, ring_rate
from spreeze_like.autotune.results import EnvRates, Hardware, ProbeResults
from spreeze_like.autotune.sampler_scaling import SamplerScalingError, measure_scaling, sampler_counts
from spreeze_like.autotune.worker import CurveJob, run_worker
from spreeze_like.config import DEFAULT_ENV_ID
from spreeze_like.devices import resolve_precision
from spreeze_like.errors import ConfigError, first_line

DEFAULT_BUDGET_S = 60.0
MIN_BUDGET_S = 0.5
SCALING_MIN_POINT_S = 0.1  # timed window per (processes, envs) point of the scaling probe, at least
CPU_MAX_BATCH = 16384  # past this a CPU update takes seconds: no use for a learner that must keep up
GPU_MAX_BATCH = 65536


def check_devices(devices: Sequence[str], hw: Hardware) -> list[str]:
    """Normalise ``devices`` (``cuda`` -> ``cuda:0``) and reject any this machine does not have."""
    known = ["cpu"] + [g.device for g in hw.gpus]
    out = []
    for device in devices:
        device = "cuda:0" if device == "cuda" else device
        if device not in known:
            have = ", ".join(known)
            why = f" ({hw.gpu_note})" if not hw.gpus and hw.gpu_note else ""
            raise ConfigError(f"device {device!r} does not exist on this machine{why}; choose from: {have}")
        if device not in out:
            out.append(device)
    return out


def curve_jobs(devices: Sequence[str], hw: Hardware, budget_s: float) -> list[CurveJob]:
    """Split the update budget over the curves to measure (see the module docstring)."""
    gpu_by_device = {g.device: g for g in hw.gpus}
    weights: list[tuple[str, int, float]] = []
    has_gpu = any(d in gpu_by_device for d in devices)
    for device in devices:
        if device == "cpu":
            weights.append(("cpu", 1, 1.0))
            if hw.usable_cores > 1:  # what a learner with every core (serial mode) gets
                weights.append(("cpu", hw.usable_cores, 0.5))
        else:
            weights.append((device, 1, 2.0 if has_gpu else 1.0))
    total = sum(w for _, _, w in weights) or 1.0
    jobs = []
    for device, threads, weight in weights:
        gpu = gpu_by_device.get(device)
        # measured in the arithmetic a run uses there by default (bf16 on a CPU that does it natively)
        precision = resolve_precision("auto", (device,))
        jobs.append(CurveJob(device, threads, budget_s * weight / total,
                             GPU_MAX_BATCH if gpu else CPU_MAX_BATCH, gpu.total_memory if gpu else 0, precision))
    return jobs


def probe_scaling(env: EnvRates, env_id: str, spec: dict, budget_s: float, cores: int,
                  progress: Callable[[str], None], env_kwargs: Mapping[str, Any] | None = None) -> None:
    """Fill ``env.parallel``: N sampler processes x K envs each, N up to what a plan may use on ``cores``.

    A failure (an env that cannot run in a fresh process, a worker that dies) is reported and
    recorded in ``env.parallel_note``; the planner then assumes linear scaling and says so.
    """
    counts = sampler_counts(max_samplers(cores))
    ks = list(ENVS_PER_SAMPLER_OPTIONS)
    seconds = max(SCALING_MIN_POINT_S, budget_s / (len(counts) * len(ks)))
    try:
        env.parallel = measure_scaling(env_id, spec, counts, ks, seconds, progress, env_kwargs)
    except SamplerScalingError as exc:
        env.parallel_note = f"the multi-process sampler probe failed: {first_line(exc)}"
        progress(env.parallel_note)


def probe_machine(
    env_id: str = DEFAULT_ENV_ID,
    algo: str = "sac",
    hidden_sizes: Sequence[int] = (256, 256),
    budget_s: float = DEFAULT_BUDGET_S,
    devices: Sequence[str] | None = None,
    progress: Callable[[str], None] = print,
    env_kwargs: Mapping[str, Any] | None = None,
    critic_hidden_sizes: Sequence[int] = (),
) -> ProbeResults:
    """Measure this machine for ``env_id``; see the module docstring.

    Args:
        env_id: gymnasium id or ``module:EnvId``.
        algo: algorithm whose update halves are timed (``sac``, ``td3``, ``ddpg``).
        hidden_sizes: hidden layer widths of the actor (and of the critic without ``critic_hidden_sizes``).
        budget_s: measuring time in seconds (start-up of processes comes on top).
        devices: devices to time updates on (default: the CPU and every GPU found).
        progress: receives one line per finished probe.
        env_kwargs: the run's ``--env-kwargs`` for ``gymnasium.make``.
        critic_hidden_sizes: the critic's widths when they differ (``--critic-hidden-sizes``); () = the actor's.

    Raises:
        spreeze_like.errors.EnvError: the env cannot be made.
        spreeze_like.errors.ConfigError: a device that does not exist, or a budget below 0.5 s.
    """
    from spreeze_like.envs import env_info
    from spreeze_like.transition import TransitionLayout

    if not budget_s >= MIN_BUDGET_S:
        raise ConfigError(f"probe budget {budget_s} s is too small; give at least {MIN_BUDGET_S} s (default "
                          f"{DEFAULT_BUDGET_S:.0f} s)")
    info = env_info(env_id, env_kwargs, first_step=True)  # a bad env fails here, in one line, before any spawn
    t0 = time.monotonic()
    hw = hardware.probe_hardware()
    gpus = ", ".join(f"{g.device} {g.name} {g.total_memory / 2**30:.0f} GiB" for g in hw.gpus) or f"none ({hw.gpu_note})"
    progress(f"hardware: {hw.cpu_model}, {hw.physical_cores} physical / {hw.logical_cores} logical cores "
             f"({hw.usable_cores} usable), {hw.memory_available / 2**30:.1f} of {hw.memory_total / 2**30:.1f} GiB "
             f"free, /dev/shm {hw.shm_free / 2**30:.1f} GiB free; GPUs: {gpus}; load {hw.load_average:.2f}")
    devices = check_devices(devices if devices is not None else ["cpu"] + [g.device for g in hw.gpus], hw)
    memcpy = memcpy_rate(0.02 * budget_s)
    progress(f"memcpy: {memcpy.text(1e-9, 'GB/s', 1)}")
    width = TransitionLayout(info.obs_dim, info.act_dim).width
    ring = ring_rate(width, 0.05 * budget_s, memcpy)
    progress(f"ring ({width} floats per transition, 256 per write): {ring.text()}")
    spec = {"algo": algo, "obs_dim": info.obs_dim, "act_dim": info.act_dim, "hidden_sizes": tuple(hidden_sizes),
            "critic_hidden_sizes": tuple(critic_hidden_sizes)}
    update_budget = 0.70 * budget_s
    env, curves = run_worker(env_id, spec, 0.15 * budget_s, curve_jobs(devices, hw, update_budget), progress,
                             hard_timeout_s=3 * budget_s + 180, env_kwargs=env_kwargs)
    probe_scaling(env, env_id, spec, 0.08 * budget_s, hw.usable_cores, progress, env_kwargs)
    return ProbeResults(
        fingerprint=hardware.fingerprint(),
        created=dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        env_id=env_id,
        algo=algo,
        hidden_sizes=list(hidden_sizes),
        critic_hidden_sizes=list(critic_hidden_sizes),
        budget_s=budget_s,
        elapsed_s=time.monotonic() - t0,
        hardware=hw,
        memcpy=memcpy,
        ring=ring,
        env=env,
        updates=curves,
        load_after=os.getloadavg()[0],
    )


def load_or_probe(
    env_id: str = DEFAULT_ENV_ID,
    algo: str = "sac",
    hidden_sizes: Sequence[int] = (256, 256),
    budget_s: float = DEFAULT_BUDGET_S,
    reprobe: bool = False,
    progress: Callable[[str], None] = print,
    env_kwargs: Mapping[str, Any] | None = None,
    critic_hidden_sizes: Sequence[int] = (),
) -> tuple[ProbeResults, Path, bool]:
    """Cached probe results for this machine and env, measuring (and caching) them when needed.

    Returns:
        (results, cache file, whether they came from the cache).
    """
    path = cache.cache_path(hardware.fingerprint(), env_id, algo, hidden_sizes, env_kwargs, critic_hidden_sizes)
    if not reprobe:
        cached = cache.load_cached(path)
        if cached is not None:
            progress(f"using cached probe results {path} (measured {cached.created}; --reprobe to refresh)")
            return cached, path, True
    progress(f"probing this machine for {env_id} (about {budget_s:.0f} s of measuring; cached in {path.parent})")
    results = probe_machine(env_id, algo, hidden_sizes, budget_s, progress=progress, env_kwargs=env_kwargs,
                            critic_hidden_sizes=critic_hidden_sizes)
    try:
        cache.save_results(results, path)
    except OSError as exc:  # an unwritable cache costs the next run a re-probe, nothing else
        progress(f"could not cache the probe results in {path}: {exc.strerror or exc}")
    return results, path, False
