"""What the probes measured, as plain dataclasses that round-trip through JSON.

Every measured figure is a :class:`Rate`: the value, its unit, how many operations were timed and
for how long, and ``estimate`` -- empty when the figure was measured properly, otherwise the reason
it is only an estimate (a time budget too small for enough repetitions, a probe that could not run
and was extrapolated from another figure). The planner copies those reasons into the plan, so a
plan never silently rests on a guess.

:class:`ProbeResults` is the whole record: hardware facts, the data-path rates, the env rates and
one :class:`UpdateCurve` per (device, torch threads). It is what the cache stores
(``~/.cache/spreeze_like/probes/``), what ``python -m spreeze_like.profile`` writes as JSON, and the
only input of :func:`spreeze_like.autotune.plan.make_plan` besides the config, so recorded probe
files are enough to test the planner on machines we do not have.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 6  # 2: curves record their precision; 3: env rates hold the multi-process sampler curve (parallel);
# 4: a bf16 curve times each batch in the arithmetic the size rule gives it (fp32 below devices.BF16_MIN_WORK);
# 5: CPU fp32 updates are timed with the explicit step (algos/explicit_grad.py) a run now takes, and a bf16 curve
# of SAC, TD3 or DDPG times batches under devices.BF16_MIN_WORK_EXPLICIT in fp32; 6: CrossQ's CPU fp32 updates are
# timed with its explicit step too (algos/explicit_renorm.py).
# Bump when a field changes meaning or a probe is added; older cached files are then re-probed.


@dataclass
class Rate:
    """One measured rate (or bandwidth).

    Attributes:
        value: operations (or bytes) per second.
        unit: what is counted, e.g. ``"steps/s"``, ``"updates/s"``, ``"bytes/s"``.
        ops: operations timed (0 when the figure was not measured at all).
        seconds: wall time of the timed part.
        estimate: empty if measured; otherwise why the figure is only an estimate.
    """

    value: float
    unit: str
    ops: int = 0
    seconds: float = 0.0
    estimate: str = ""

    @property
    def measured(self) -> bool:
        return not self.estimate

    def text(self, scale: float = 1.0, unit: str | None = None, digits: int = 0) -> str:
        """``"12,345 steps/s"`` (with ``" (estimate: why)"`` when it is one)."""
        shown = f"{self.value * scale:,.{digits}f} {unit or self.unit}"
        return shown + (f" (estimate: {self.estimate})" if self.estimate else "")


@dataclass
class GpuInfo:
    """One CUDA device as the GPU subprocess saw it."""

    index: int
    name: str
    total_memory: int  # bytes
    free_memory: int  # bytes, at probe time
    capability: str = ""

    @property
    def device(self) -> str:
        return f"cuda:{self.index}"


@dataclass
class Hardware:
    """Static facts about the machine (cheap: psutil, /proc, statvfs, one GPU subprocess)."""

    hostname: str
    cpu_model: str
    physical_cores: int
    logical_cores: int
    usable_cores: int  # what this process may run on: affinity mask and cgroup quota applied
    memory_total: int  # bytes
    memory_available: int  # bytes, at probe time
    shm_total: int  # bytes of /dev/shm
    shm_free: int
    gpus: list[GpuInfo] = field(default_factory=list)
    gpu_note: str = ""  # why the GPU list is empty or incomplete (no CUDA build, driver error, ...)
    torch_version: str = ""
    load_average: float = 0.0  # 1-minute load average when probing began (a busy machine skews rates)


@dataclass
class EnvRates:
    """How fast one env steps in one process (the sampler's view).

    ``per_sampler`` maps envs-per-sampler to env steps/s of one sampler process running the real
    sampler loop (one batched policy inference for all its envs, then one step of each).
    ``parallel`` maps a number of sampler processes N, all stepping at once, to envs-per-sampler K
    to their *total* env steps/s (:mod:`spreeze_like.autotune.sampler_scaling`); empty in probe
    files of schema 2, which did not measure it.
    """

    env_id: str
    obs_dim: int
    act_dim: int
    step: Rate  # env.step alone, random actions
    step_with_policy: Rate  # one env, one actor forward (the sampler's numpy policy) per step
    per_sampler: dict[int, Rate] = field(default_factory=dict)
    parallel: dict[int, dict[int, Rate]] = field(default_factory=dict)
    parallel_note: str = ""  # why ``parallel`` is empty (not measured, the probe failed), else empty

    def best_envs_per_sampler(self, tolerance: float = 0.05) -> int:
        """Smallest envs-per-sampler within ``tolerance`` of the fastest (fewer envs: fresher policy)."""
        if not self.per_sampler:
            return 1
        top = max(r.value for r in self.per_sampler.values())
        return min(n for n, r in self.per_sampler.items() if r.value >= (1.0 - tolerance) * top)


@dataclass
class UpdatePoint:
    """Critic and actor update rates at one batch size, on one device."""

    batch_size: int
    critic: Rate  # critic updates/s: replay sample + host-to-device + algos critic step
    actor: Rate  # actor updates/s, the same loop for the actor half
    peak_memory: int = 0  # bytes of device memory at the peak (CUDA only; 0 on the CPU)
    # the learners' arithmetic at this batch: the curve's, except fp32 where bf16 would not pay at this size
    # (devices.bf16_pays, as a run's --precision auto decides); "" in recordings before schema 4
    precision: str = ""

    @property
    def critic_frames(self) -> float:
        """Transitions per second the critic consumes at this batch size."""
        return self.critic.value * self.batch_size

    @property
    def serial_rate(self) -> float:
        """(critic + actor) update pairs per second when one process does both in turn."""
        return 1.0 / (1.0 / self.critic.value + 1.0 / self.actor.value)


@dataclass
class UpdateCurve:
    """Update rates across batch sizes for one device and torch thread count."""

    device: str
    threads: int
    points: list[UpdatePoint] = field(default_factory=list)
    precision: str = "fp32"  # the learners' arithmetic while measuring (``fp32`` or ``bf16``)
    stop_reason: str = ""  # why the doubling stopped (memory, time budget, size cap, flat curve)

    def point(self, batch_size: int) -> UpdatePoint | None:
        return next((p for p in self.points if p.batch_size == batch_size), None)


@dataclass
class ProbeResults:
    """Everything the probes found on one machine for one env (see the module docstring)."""

    fingerprint: str
    created: str  # ISO time
    env_id: str
    algo: str
    hidden_sizes: list[int]
    budget_s: float
    elapsed_s: float
    hardware: Hardware
    memcpy: Rate  # bytes/s, one process, large buffer
    ring: Rate  # transitions/s through one spreeze ring, producer process -> consumer process
    env: EnvRates
    updates: list[UpdateCurve] = field(default_factory=list)
    load_after: float = 0.0
    schema: int = SCHEMA_VERSION
    critic_hidden_sizes: list[int] = field(default_factory=list)  # [] = hidden_sizes (the file's name says which)

    def curves(self, device: str) -> list[UpdateCurve]:
        return [c for c in self.updates if c.device == device]

    def curve(self, device: str, threads: int | None = None) -> UpdateCurve | None:
        """The curve for ``device`` (with ``threads`` torch threads; default: the 1-thread one, or any)."""
        found = self.curves(device)
        if threads is not None:
            return next((c for c in found if c.threads == threads), None)
        return next((c for c in found if c.threads == 1), found[0] if found else None)

    def estimates(self) -> list[str]:
        """``"what: why"`` for every figure that is an estimate."""
        named: list[tuple[str, Rate]] = [("memcpy", self.memcpy), ("ring", self.ring), ("env step", self.env.step),
                                         ("env step with policy", self.env.step_with_policy)]
        named += [(f"sampler with {n} envs", r) for n, r in self.env.per_sampler.items()]
        named += [(f"{n} samplers x {k} envs", r) for n, by_k in self.env.parallel.items() for k, r in by_k.items()]
        for c in self.updates:
            for p in c.points:
                named += [(f"{c.device}/{c.threads}t critic@{p.batch_size}", p.critic),
                          (f"{c.device}/{c.threads}t actor@{p.batch_size}", p.actor)]
        return [f"{what}: {rate.estimate}" for what, rate in named if rate.estimate]

    # --- JSON ------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProbeResults:
        return _build(cls, data)

    @classmethod
    def load(cls, path: str | Path) -> ProbeResults:
        return cls.from_dict(json.loads(Path(path).read_text()))


def _build(tp: Any, value: Any) -> Any:
    """Rebuild a (nested) dataclass value from ``dataclasses.asdict`` output, using the type hints."""
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        names = {f.name for f in dataclasses.fields(tp)}
        return tp(**{k: _build(hints[k], v) for k, v in value.items() if k in names})
    if origin is list:
        (item,) = typing.get_args(tp)
        return [_build(item, v) for v in value]
    if origin is dict:
        key_tp, val_tp = typing.get_args(tp)
        return {key_tp(k): _build(val_tp, v) for k, v in value.items()}  # JSON keys are strings
    if origin in (typing.Union, types.UnionType):
        return value
    if tp is float and isinstance(value, int):
        return float(value)
    return value
