"""From probe results to a plan: the run's parallel settings, each with a one-line reason.

:func:`make_plan` is a pure function of (probe results, config, explicitly set fields, whether the
parallel mode exists): no measuring, no I/O, so recorded probe files test it for machines we do not
have. Every choice is a :class:`Choice` holding the value, the reason, and who decided (``plan`` or
``user``: a field the user set explicitly is taken as given, and the rest is planned around it).

The rules, in the order they are applied:

1. **Devices.** Rank the devices by their best measured critic update frames/s. Two or more GPUs:
   critic on the fastest (its update costs about twice the actor's), actor on the next. One GPU
   faster than the CPU: both learners on it. Otherwise the CPU.
2. **Mode.** Both modes are planned in full (rules 3-5) and the one expected to learn from more env
   steps/s (at a replay ratio inside the band of rule 3) wins; serial only if by ``SERIAL_MIN_GAIN`` (1.5x).
   Busy processes never exceed the cores: each learner is busy; a sampler is paced to the learners
   (the parallel mode's UTD pacing), so it uses only its duty cycle -- the steps/s the learners need
   over the steps/s it can make -- and counts as busy from half a core up; the supervisor, monitor
   and evaluator are mostly idle. Expected rates shrink in proportion when the expected CPU work
   exceeds the cores. (On the 2-core development machine 1 sampler needs ~2% of a core beside two
   CPU learners: the parallel mode is expected at ~1.9x the serial update rate.)
3. **Batch size and UTD** for learning speed, not update frames/s alone
   (:mod:`~spreeze_like.autotune.replay_ratio`): the replay ratio R = batch x UTD stays in
   [128, 1024] around SAC's 256, and among the measured batch sizes up to the update-rate knee
   (double from 256 while a doubling buys >= 1.5x the critic frames/s; within 80% of a GPU's memory;
   at most 8192) the plan takes the one that learns from the most env steps/s -- the batch grows only
   as far as the samplers the cores allow can feed it. When the learner is the bottleneck R stays at
   256, with GPU learners too (R 128 learned less on a measured GPU grid: replay_ratio.py). A short run
   keeps at least 20,000 critic updates in all (``total_steps x utd``). Serial mode: the knee of the
   update-pair curve at R 256. Learners on the CPU keep the smallest measured batch (256; ``knee_batch``).
4. **Samplers x envs per sampler**: the fewest processes, then the fewest envs each, whose measured
   total rate (N processes stepping at once: :mod:`~spreeze_like.autotune.sampler_supply`) covers
   what the critic learns from plus 25%; at most the cores minus the learners' (minus one support
   core from 8 cores up). Serial mode: one sampler, the fewest envs within 5% of the best step cost.
5. **Threads.** Samplers and GPU learners 1. A CPU learner gets the cores nobody else uses, but only
   if the all-cores curve measured faster than 1 thread (oversubscribed threads are slower).
6. **Replay** as large as the run needs (``total_steps``, at most the configured size) and as fits
   in half of the free memory (/dev/shm for the parallel mode) after the processes' own memory.
   **Rings**: the size the parallel mode derives from its pacing lead, counted in the memory.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import asdict, dataclass, field
from typing import Any

from spreeze_like.autotune.layout import (
    BATCH_CAP,
    DOUBLING_GAIN,
    GPU_MEMORY_FRACTION,
    PARALLEL_LEARNERS,
    Ctx,
    plan_layout,
)
from spreeze_like.autotune.results import ProbeResults, UpdateCurve
from spreeze_like.errors import ConfigError

__all__ = ["BATCH_CAP", "DOUBLING_GAIN", "GPU_MEMORY_FRACTION", "Choice", "Plan", "make_plan", "replay_row_bytes"]

MEMORY_FRACTION = 0.5
PROCESS_BYTES = 600 * 2**20  # resident memory of one process with torch and an env loaded
PARALLEL_IDLE = 3  # supervisor, monitor, evaluator: mostly idle, but they take memory
# Serial mode must be expected to learn from this many times parallel's env steps/s to be chosen. Parallel
# restarts a sampler whose env crashes (a serial run ends) and keeps evaluations off the learning loop. On
# HalfCheetah-v5 CrossQ on a 2-vCPU Zen 4 (2026-12-02) A/B runs measured serial at 1.01-1.03x parallel, and
# six probes there whose figures were kept expected 0.78-1.28x: a gain inside that spread is a tie, and a tie
# goes to parallel.
SERIAL_MIN_GAIN = 1.5
PLANNED_FIELDS = ("serial", "actor_device", "critic_device", "precision", "batch_size", "utd", "samplers",
                  "envs_per_sampler", "torch_threads", "buffer_size", "ring_capacity")


@dataclass
class Choice:
    """One planned setting: the value, why, and who decided it (``plan`` or ``user``)."""

    value: Any
    reason: str
    source: str = "plan"


@dataclass
class Plan:
    """The settings for one run on one machine; see the module docstring."""

    env_id: str
    fingerprint: str
    choices: dict[str, Choice] = field(default_factory=dict)
    predicted: dict[str, float] = field(default_factory=dict)  # sample_hz, update_hz, update_frames_hz, ...
    estimates: list[str] = field(default_factory=list)  # probe figures the plan rests on that are estimates
    notes: list[str] = field(default_factory=list)

    def value(self, name: str) -> Any:
        return self.choices[name].value

    def settings(self) -> dict[str, Any]:
        return {k: c.value for k, c in self.choices.items()}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    def text(self) -> str:
        """The readable plan: one line per setting with its reason, then predictions and caveats."""
        lines = [f"autotune plan for {self.env_id} on {self.fingerprint}:"]
        for name, c in self.choices.items():
            flag = "--" + name.replace("_", "-")
            lines.append(f"  {flag:<20} {_show(c.value):<10} {c.reason}")
        p = self.predicted
        if p:
            lines.append(f"  expected: {p.get('sample_hz', 0):,.0f} env steps/s, {p.get('update_hz', 0):,.1f} critic "
                         f"updates/s, {p.get('update_frames_hz', 0):,.0f} update frames/s, replay ratio "
                         f"{p.get('replay_ratio', 0):,.0f}, {p.get('busy_processes', 0):.0f} busy process(es) on "
                         f"{p.get('cores', 0):.0f} core(s); samplers could make {p.get('max_sampler_hz', 0):,.0f} "
                         "env steps/s")
        lines += [f"  note: {n}" for n in self.notes]
        lines += [f"  estimate: {e}" for e in self.estimates]
        return "\n".join(lines)


def _gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def _show(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


# --- helpers ----------------------------------------------------------------------------------------
def _best_frames(curve: UpdateCurve | None) -> float:
    return max((p.critic_frames for p in curve.points), default=0.0) if curve else 0.0


def _check_device(device: str, probes: ProbeResults, flag: str) -> str:
    device = "cuda:0" if device == "cuda" else device
    known = ["cpu"] + [g.device for g in probes.hardware.gpus]
    if device not in known:
        raise ConfigError(f"--{flag} {device}: no such device on this machine (it has {', '.join(known)}); "
                          f"use --{flag} auto")
    return device


def replay_row_bytes(obs_dim: int, act_dim: int, prioritized: bool) -> float:
    """Bytes per replay slot: the float32 row columns, the uint64 generation, and the sum-tree leaf."""
    row = 4 * (2 * obs_dim + act_dim + 3) + 8
    return row + (8.0 if prioritized else 0.0)  # float32 leaf + float64 inner nodes (~1/K of them) + slack


# --- the planner ------------------------------------------------------------------------------------------
def make_plan(probes: ProbeResults, config: Any, explicit: Collection[str] = (),
              parallel_available: bool = True) -> Plan:
    """The plan for ``config`` (a :class:`~spreeze_like.config.TrainConfig`) on the probed machine.

    Args:
        probes: this machine's probe results for the config's env.
        config: the run's settings; fields named in ``explicit`` are the user's and are kept.
        explicit: names of the fields the user set explicitly.
        parallel_available: whether the multi-process mode is built.

    Raises:
        ConfigError: a device the user named that the machine does not have.
    """
    explicit = set(explicit)
    hw = probes.hardware
    plan = Plan(env_id=probes.env_id, fingerprint=probes.fingerprint)
    gpus = {g.device: g for g in hw.gpus}
    mine = {name for name in PLANNED_FIELDS if name in explicit}

    def choose(name: str, value: Any, reason: str) -> Any:
        if name in mine:
            value = getattr(config, name)
            plan.choices[name] = Choice(value, "set by you", "user")
        else:
            plan.choices[name] = Choice(value, reason)
        return value

    # 1. devices ---------------------------------------------------------------------------------------
    ranked = sorted((d for d in ["cpu", *gpus] if probes.curve(d) and probes.curve(d).points),
                    key=lambda d: _best_frames(probes.curve(d)), reverse=True)
    fastest_gpus = [d for d in ranked if d != "cpu"]
    cpu_best = _best_frames(probes.curve("cpu"))
    if len(fastest_gpus) >= 2:
        critic_dev, actor_dev = fastest_gpus[0], fastest_gpus[1]
        why = f"{len(fastest_gpus)} GPUs measured: each learner gets a whole device, the critic (the larger update) the faster"
        why_a = why
    elif fastest_gpus and _best_frames(probes.curve(fastest_gpus[0])) > cpu_best:
        critic_dev = actor_dev = fastest_gpus[0]
        why = why_a = (f"{critic_dev} does {_best_frames(probes.curve(critic_dev)):,.0f} critic frames/s at best, "
                       f"the CPU {cpu_best:,.0f}")
    else:
        critic_dev = actor_dev = "cpu"
        why = why_a = "no GPU measured faster than the CPU" if fastest_gpus else "no GPU on this machine"
    for flag in ("actor_device", "critic_device"):
        if flag in mine and getattr(config, flag) != "auto":
            _check_device(getattr(config, flag), probes, flag.replace("_", "-"))
        elif flag in mine:
            mine.discard(flag)  # "auto" typed explicitly: planning is what auto means here
    actor_dev = _check_device(choose("actor_device", actor_dev, why_a), probes, "actor-device")
    critic_dev = _check_device(choose("critic_device", critic_dev, why), probes, "critic-device")
    _plan_precision(probes, config, choose, critic_dev, actor_dev, "precision" in mine, plan.notes)

    # 2-5. the layout: each mode planned in full, then the faster one -------------------------------------
    ctx = Ctx(probes, config, mine, critic_dev, actor_dev)
    if "serial" in mine:
        layout = plan_layout(ctx, bool(config.serial))
        layout.choices["serial"] = (bool(config.serial), "")
    elif not parallel_available:
        layout = plan_layout(ctx, True)
        layout.choices["serial"] = (True, "the parallel mode is not built in this version")
    else:
        serial_layout, parallel_layout = plan_layout(ctx, True), plan_layout(ctx, False)
        s_hz, p_hz = serial_layout.predicted["sample_hz"], parallel_layout.predicted["sample_hz"]
        s_r, p_r = serial_layout.predicted["replay_ratio"], parallel_layout.predicted["replay_ratio"]
        if parallel_layout.violation:
            layout, why = serial_layout, f"parallel would break a rule ({parallel_layout.violation})"
        elif p_hz * SERIAL_MIN_GAIN >= s_hz:
            margin = (f"; one process's {s_hz / p_hz:.2f}x is under the {SERIAL_MIN_GAIN}x it must show to give up "
                      "the parallel mode's restarts") if s_hz > p_hz else ""
            layout, why = parallel_layout, (f"expected to learn from {p_hz:,.0f} env steps/s at R {p_r:,.0f} in "
                                            f"parallel vs {s_hz:,.0f} at R {s_r:,.0f} in one process "
                                            f"({parallel_layout.busy_note}){margin}")
        else:
            layout, why = serial_layout, (f"expected to learn from {s_hz:,.0f} env steps/s at R {s_r:,.0f} in one "
                                          f"process vs {p_hz:,.0f} at R {p_r:,.0f} in parallel")
        layout.choices["serial"] = (layout.serial, why)
    for name in ("serial", "batch_size", "utd", "envs_per_sampler", "samplers", "torch_threads"):
        value, reason = layout.choices[name]
        choose(name, value, reason)
    _small_update_precision(plan, config, choose, "precision" in mine)
    plan.predicted = layout.predicted
    plan.notes += layout.notes
    _time_limit_note(plan, config)

    # 6. memory: replay and rings -------------------------------------------------------------------------------
    _plan_memory(plan, probes, config, choose, int(plan.value("samplers")), bool(plan.value("serial")))
    plan.estimates = probes.estimates()
    return plan


def _time_limit_note(plan: Plan, config: Any) -> None:
    """With ``--time-limit-s``: where the plan's expected rate ends this session, against ``--total-steps``.

    The plan stays the whole run's (its replay and its least UTD count ``total_steps``): a time limit is a
    session's, and ``--resume`` sessions continue to ``total_steps`` (docs/trainer.md). The figure is the
    plan's own expectation, start-up and evaluations not counted, so it is an upper end.
    """
    limit, rate = float(getattr(config, "time_limit_s", 0.0)), plan.predicted.get("sample_hz", 0.0)
    if limit <= 0 or rate <= 0:
        return
    total, reach = int(config.total_steps), rate * limit
    if reach < total:
        plan.notes.append(f"--time-limit-s {limit:g}: at the expected {rate:,.0f} env steps/s this session ends near "
                          f"{reach:,.0f} of the {total:,} env steps at most (--resume continues the run)")
    else:
        plan.notes.append(f"--time-limit-s {limit:g}: the {total:,} env steps take about {total / rate:,.0f} s at the "
                          f"expected {rate:,.0f} env steps/s, within the limit")


def _plan_precision(probes: ProbeResults, config: Any, choose: Any, critic_dev: str, actor_dev: str, user: bool,
                    notes: list[str]) -> None:
    """Precision: what the learners' curves were measured in (the devices' ``auto``), or the user's.

    The probe times each device in the arithmetic ``--precision auto`` gives it there (bf16 on a
    CPU with native bf16 dot products, else fp32), so the rates the other rules plan with are the
    rates a run gets. Both learners share one setting; when the two devices were measured in
    different arithmetic the plan takes fp32, the one every device runs well.
    """
    measured = {c.precision for d in {critic_dev, actor_dev} for c in probes.curves(d)} or {"fp32"}
    mixed = len(measured) > 1
    value = "fp32" if mixed else next(iter(measured))
    if value == "bf16":
        reason = ("this CPU multiplies bf16 natively: the update curves below were measured with bf16 hidden layers "
                  "where the update is large enough for bf16 to pay")
    elif mixed:
        reason = "the learners' devices were measured in different arithmetic; fp32 runs well on all of them"
    else:
        reason = "bf16 would not pay on these learner devices (no native CPU bf16; small MLPs on a GPU are launch-bound)"
    chosen = choose("precision", value, reason)
    if user and chosen not in ("auto", value):
        notes.append(f"--precision {chosen} is yours; the expected rates were measured in {value}")


def _small_update_precision(plan: Plan, config: Any, choose: Any, user: bool) -> None:
    """bf16 planned for a CPU whose update at the planned batch is too small for it to pay: fp32 instead.

    bf16 autocast costs a fixed cast per layer and step, which small networks at small batches do not earn
    back (``devices.bf16_pays``: batch x widest layer^2 under 8.4 M ran 0.54-0.95x as fast in bf16; under 16.8 M
    against SAC's, TD3's and DDPG's explicit fp32 step). The probe timed such batches in fp32 too
    (``update_probe.at_batch``, schema 4), so the planned rates are the run's."""
    from spreeze_like.devices import bf16_min_work, bf16_pays

    if user or plan.value("precision") != "bf16":
        return
    batch, widest = int(plan.value("batch_size")), config.widest_hidden
    if bf16_pays(batch, widest, explicit=config.bf16_starts_late):
        return
    floor = bf16_min_work(config.bf16_starts_late)
    choose("precision", "fp32", f"batch {batch} x widest layer {widest}^2 = {batch * widest * widest:,} is under "
           f"{floor:,}: bf16 autocast costs more than it saves at this size (the probe timed this batch in "
           "fp32 too)")


def _plan_memory(plan: Plan, probes: ProbeResults, config: Any, choose: Any, samplers: int, serial: bool) -> None:
    hw, env = probes.hardware, probes.env
    width = 2 * env.obs_dim + env.act_dim + 3
    # the parallel mode sizes rings from its pacing lead (how far samplers may run ahead of the
    # learners); the plan reports that size and counts its memory rather than inventing another
    from spreeze_like.procs import pacing

    n_envs = int(plan.choices["envs_per_sampler"].value)
    rows_per_step = 1 + int(getattr(config, "her_goals", 0))  # --her-goals K stores 1 + K rows a step (roles/her.py)
    lead = pacing.default_lead(samplers, n_envs, float(plan.choices["utd"].value) / rows_per_step)
    ring = pacing.ring_capacity(lead, n_envs)
    ring_bytes = 0 if serial else samplers * ring * width * 4
    processes = 1 if serial else samplers + PARALLEL_LEARNERS + PARALLEL_IDLE
    free = hw.memory_available if serial else min(hw.memory_available, hw.shm_free or hw.memory_available)
    room = max(0.0, MEMORY_FRACTION * (free - processes * PROCESS_BYTES) - ring_bytes)
    row = replay_row_bytes(env.obs_dim, env.act_dim, bool(config.prioritized))
    fits = int(room // row)
    want = min(int(config.buffer_size), max(int(config.total_steps) * rows_per_step, 1))
    where = "memory" if serial else "/dev/shm"
    if want <= fits:
        rows = f" x {rows_per_step} rows (--her-goals {rows_per_step - 1})" if rows_per_step > 1 else ""
        reason = (f"the run's {config.total_steps:,} steps{rows} (at most the configured {config.buffer_size:,}): "
                  f"{_gib(want * row)} of {_gib(room)} room in {where}")
        size = want
    else:
        size = fits
        reason = f"{want:,} transitions would not fit: {_gib(room)} room in {where} (half of the free, after processes)"
    size = choose("buffer_size", max(size, int(plan.choices["batch_size"].value)), reason)
    plan.predicted["replay_bytes"] = float(size * row)
    plan.predicted["memory_room_bytes"] = float(room)
    if size * row > room:
        plan.notes.append(f"replay of {size:,} transitions needs {size * row / 2**30:.2f} GiB, more than the "
                          f"{room / 2**30:.2f} GiB room in {where}")
    if serial:
        choose("ring_capacity", 0, "serial mode uses no rings")
    else:
        choose("ring_capacity", ring, f"what the parallel mode sizes itself: a power of two above twice the pacing "
                                      f"lead of {lead} transitions ({ring * width * 4 / 2**10:,.0f} KiB per sampler)")
