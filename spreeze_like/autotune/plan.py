"""From probe results to a plan: the run's parallel settings, each with a one-line reason.

:func:`make_plan` is a pure function of (probe results, config, explicitly set fields, whether the
parallel mode exists): no measuring, no I/O, so recorded probe files test it for machines we do not
have. Every choice is a :class:`Choice` holding the value, the reason, and who decided (``plan`` or
``user``: a field the user set explicitly is taken as given, and the rest is planned around it).

The rules, in the order they are applied:

1. **Devices.** Rank the devices by their best measured critic update frames/s. Two or more GPUs:
   critic on the fastest (its update costs about twice the actor's), actor on the next. One GPU
   faster than the CPU: both learners on it. Otherwise the CPU.
2. **Mode.** Both modes are planned in full (rules 3-5) and the one with the higher expected update
   frames/s wins. Busy processes never exceed the cores: each learner is busy; a sampler is paced
   to the learners (the parallel mode's UTD pacing), so it uses only its duty cycle -- the steps/s
   the learners need over the steps/s it can make -- and counts as busy from half a core up; the
   supervisor, monitor and evaluator are mostly idle. Expected rates shrink in proportion when the
   expected CPU work exceeds the cores. (On the 2-core development machine 1 sampler needs ~2% of
   a core beside two CPU learners: the parallel mode is expected at ~1.9x the serial update rate.)
3. **Batch size**, from the critic device's measured curve (points within 80% of the GPU's memory,
   at most 8192): double the batch while a doubling buys at least 1.5x the update frames/s, i.e.
   costs at most a quarter of the update rate. On a GPU the update time is flat until the device
   saturates, so this lands on a large batch; on a CPU the curve bends early and it stays small.
   In parallel mode, when the samplers the cores allow cannot feed the critic at the target UTD, the
   batch keeps growing while the critic still keeps up with them: the learner would idle otherwise.
4. **Samplers** so that their measured rate matches what the critic consumes at the target UTD
   (``updates/s / utd``), within the cores left after the learners. **Envs per sampler**: the
   fewest that cost nothing measurable (serial: within 5% of the best time per step including the
   updates; parallel: no more sampler processes needed than with the fastest count).
5. **Threads.** Samplers and GPU learners 1. A CPU learner gets the cores nobody else uses, but only
   if the all-cores curve measured faster than 1 thread (oversubscribed threads are slower).
6. **Replay** as large as the run needs (``total_steps``, at most the configured size) and as fits
   in half of the free memory (/dev/shm for the parallel mode) after the processes' own memory.
   **Rings**: the size the parallel mode derives from its pacing lead, counted in the memory.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection
from dataclasses import asdict, dataclass, field
from typing import Any

from spreeze_like.autotune.results import EnvRates, ProbeResults, UpdateCurve, UpdatePoint
from spreeze_like.errors import ConfigError

DOUBLING_GAIN = 1.5
BATCH_CAP = 8192
GPU_MEMORY_FRACTION = 0.8
MEMORY_FRACTION = 0.5
PROCESS_BYTES = 600 * 2**20  # resident memory of one process with torch and an env loaded
THREAD_GAIN = 1.10
PARALLEL_LEARNERS = 2  # critic learner + actor learner: busy processes
PARALLEL_IDLE = 3  # supervisor, monitor, evaluator: mostly idle, but they take memory
PLANNED_FIELDS = ("serial", "actor_device", "critic_device", "batch_size", "samplers", "envs_per_sampler",
                  "torch_threads", "buffer_size", "ring_capacity")


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
            who = "  [your flag]" if c.source == "user" else ""
            lines.append(f"  {flag:<20} {_show(c.value):<10} {c.reason}{who}")
        p = self.predicted
        if p:
            lines.append(f"  expected: {p.get('sample_hz', 0):,.0f} env steps/s, {p.get('update_hz', 0):,.1f} critic "
                         f"updates/s, {p.get('update_frames_hz', 0):,.0f} update frames/s, "
                         f"{p.get('busy_processes', 0):.0f} busy process(es) on {p.get('cores', 0):.0f} core(s)")
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


def _allowed_points(curve: UpdateCurve, memory_total: int) -> list[UpdatePoint]:
    points = [p for p in curve.points if p.batch_size <= BATCH_CAP]
    if memory_total:
        points = [p for p in points if p.peak_memory <= GPU_MEMORY_FRACTION * memory_total]
    return sorted(points, key=lambda p: p.batch_size)


def knee_batch(points: list[UpdatePoint], serial: bool) -> tuple[UpdatePoint, str]:
    """Double while a doubling gives >= DOUBLING_GAIN x the frames/s; returns the point and the evidence."""
    def frames(p: UpdatePoint) -> float:
        return p.batch_size * (p.serial_rate if serial else p.critic.value)

    chosen = points[0]
    for nxt in points[1:]:
        if nxt.batch_size != 2 * chosen.batch_size or frames(nxt) < DOUBLING_GAIN * frames(chosen):
            break
        chosen = nxt
    after = next((p for p in points if p.batch_size > chosen.batch_size), None)
    what = "update-pair" if serial else "critic"
    if after is None:
        evidence = f"largest measured size within the limits ({frames(chosen):,.0f} {what} frames/s)"
    else:
        evidence = (f"doubling to {after.batch_size} gives {frames(after) / frames(chosen):.2f}x the {what} frames/s "
                    f"({frames(chosen):,.0f} -> {frames(after):,.0f}), below the {DOUBLING_GAIN}x that pays for the "
                    f"lost update rate")
    return chosen, evidence


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

    # 2-5. the layout: each mode planned in full, then the faster one -------------------------------------
    ctx = _Ctx(probes, config, mine, critic_dev, actor_dev)
    if "serial" in mine:
        layout = _layout(ctx, bool(config.serial))
        layout.choices["serial"] = (bool(config.serial), "")
    elif not parallel_available:
        layout = _layout(ctx, True)
        layout.choices["serial"] = (True, "the parallel mode is not built in this version")
    else:
        serial_layout, parallel_layout = _layout(ctx, True), _layout(ctx, False)
        s_hz, p_hz = serial_layout.predicted["update_frames_hz"], parallel_layout.predicted["update_frames_hz"]
        if parallel_layout.violation:
            layout, why = serial_layout, f"parallel would break a rule ({parallel_layout.violation})"
        elif p_hz >= s_hz:
            layout, why = parallel_layout, (f"expected {p_hz:,.0f} update frames/s in parallel vs {s_hz:,.0f} in one "
                                            f"process ({parallel_layout.busy_note})")
        else:
            layout, why = serial_layout, f"expected {s_hz:,.0f} update frames/s in one process vs {p_hz:,.0f} in parallel"
        layout.choices["serial"] = (layout.serial, why)
    for name in ("serial", "batch_size", "envs_per_sampler", "samplers", "torch_threads"):
        value, reason = layout.choices[name]
        choose(name, value, reason)
    plan.predicted = layout.predicted
    plan.notes += layout.notes

    # 6. memory: replay and rings -------------------------------------------------------------------------------
    _plan_memory(plan, probes, config, choose, int(plan.value("samplers")), bool(plan.value("serial")))
    plan.estimates = probes.estimates()
    return plan


@dataclass
class _Ctx:
    """What every layout needs: the probes, the config, the user's fields and the devices."""

    probes: ProbeResults
    config: Any
    mine: set[str]
    critic_dev: str
    actor_dev: str

    def fixed(self, name: str, planned: Any) -> Any:
        return getattr(self.config, name) if name in self.mine else planned


@dataclass
class _Layout:
    """One mode's settings (value, reason) and its predicted rates."""

    serial: bool
    choices: dict[str, tuple[Any, str]] = field(default_factory=dict)
    predicted: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    violation: str = ""  # a rule this layout breaks (only possible when the user fixed a setting)
    busy_note: str = ""


def _layout(ctx: _Ctx, serial: bool) -> _Layout:
    """Batch, envs per sampler, samplers and threads for one mode (steps 3-5 of the module docstring)."""
    probes, config = ctx.probes, ctx.config
    hw, env = probes.hardware, probes.env
    cores, utd = hw.usable_cores, float(config.utd)
    delay = config.policy_delay or (2 if config.algo == "td3" else 1)
    out = _Layout(serial)
    gpus = {g.device: g for g in hw.gpus}
    cpu_learners = sum(d == "cpu" for d in (ctx.critic_dev, ctx.actor_dev))
    best_sampler = env.per_sampler.get(env.best_envs_per_sampler()) or env.step_with_policy
    max_samplers = max(1, cores - PARALLEL_LEARNERS)

    # threads of a serial CPU learner are settled first: they pick the curve the batch is read from
    threads, thread_reason = 1, "learners on GPUs: their CPU side only launches kernels"
    if serial and cpu_learners:
        threads, thread_reason = _learner_threads(probes, cores, cores - 1, 1)
    threads = ctx.fixed("torch_threads", threads)
    dev = ctx.critic_dev
    curve = probes.curve(dev, threads if dev == "cpu" else None) or probes.curve(dev)
    if curve is None or not curve.points:
        raise ConfigError(f"no update rates were measured on {dev}; rerun with --reprobe")

    # 3. batch size
    memory_total = gpus[dev].total_memory if dev in gpus else 0
    points = _allowed_points(curve, memory_total) or curve.points[:1]
    knee, evidence = knee_batch(points, serial)
    chosen, reason = knee, f"{dev}: {evidence}"
    if not serial:
        feed = max_samplers * best_sampler.value * utd  # critic updates/s the samplers can support
        fed = [p for p in points if p.batch_size > knee.batch_size and p.critic.value >= feed]
        if knee.critic.value > feed and fed:
            chosen = fed[-1]
            reason = (f"{dev}: {max_samplers} sampler(s) feed at most {feed:,.0f} critic updates/s at UTD {utd:g}; "
                      f"batch {chosen.batch_size} still does {chosen.critic.value:,.0f}/s, so the larger batch costs "
                      f"no update rate (knee alone: {knee.batch_size})")
    batch = ctx.fixed("batch_size", chosen.batch_size)
    out.choices["batch_size"] = (batch, reason)
    point = curve.point(batch) or _nearest(curve, batch)
    if memory_total and batch > max(p.batch_size for p in curve.points):
        out.notes.append(f"batch {batch} is beyond the largest size measured on {dev}; it may not fit")
    elif memory_total and point.peak_memory > GPU_MEMORY_FRACTION * memory_total:
        out.notes.append(f"batch {batch} needs about {point.peak_memory / 2**30:.1f} GiB on {dev} "
                         f"({memory_total / 2**30:.1f} GiB total)")
    critic_hz = point.critic.value
    if not serial and ctx.critic_dev == ctx.actor_dev and dev != "cpu":
        # both learners take turns on one GPU: the critic gets the device between the actor's updates
        critic_hz = 1.0 / (1.0 / point.critic.value + 1.0 / (delay * point.actor.value))
        out.notes.append(f"both learners share {dev}: the expected critic rate counts the actor's turns")
    elif not serial:
        critic_hz = min(critic_hz, delay * point.actor.value)  # the critic waits for a slower actor (pacing)

    # 4. envs per sampler, samplers
    n_envs, n_reason = _envs_per_sampler(env, point, utd, serial, max_samplers, config)
    n_envs = ctx.fixed("envs_per_sampler", n_envs)
    out.choices["envs_per_sampler"] = (n_envs, n_reason)
    sampler_hz = (env.per_sampler.get(n_envs) or best_sampler).value
    if serial:
        samplers = ctx.fixed("samplers", 1)
        out.choices["samplers"] = (samplers, "serial mode steps its samplers in turn in one process: more only adds envs")
    else:
        need = critic_hz / utd
        samplers = ctx.fixed("samplers", max(1, min(math.ceil(need / sampler_hz), max_samplers)))
        why = (f"critic consumes {need:,.0f} env steps/s at UTD {utd:g}, one sampler makes {sampler_hz:,.0f}/s; "
               f"cores allow {max_samplers}")
        out.choices["samplers"] = (samplers, why)
    # 5. threads of parallel CPU learners: the cores the samplers leave, if more threads measured faster
    if not serial and cpu_learners:
        duty = min(1.0, critic_hz / utd / (samplers * sampler_hz))
        spare = int(cores - PARALLEL_LEARNERS - math.ceil(samplers * duty))
        threads, thread_reason = ((1, "one thread each: samplers and learners already fill the cores") if spare <= 0
                                  else _learner_threads(probes, cores, spare, cpu_learners))
        threads = ctx.fixed("torch_threads", threads)
    out.choices["torch_threads"] = (threads, thread_reason)
    _predict(out, point, critic_hz, sampler_hz, samplers, utd, threads, cpu_learners, cores, delay)
    return out


def _nearest(curve: UpdateCurve, batch: int) -> UpdatePoint:
    return min(curve.points, key=lambda p: abs(math.log2(p.batch_size) - math.log2(max(batch, 1))))


def _envs_per_sampler(env: EnvRates, point: UpdatePoint, utd: float, serial: bool, max_samplers: int,
                      config: Any) -> tuple[int, str]:
    """Fewest envs per sampler that cost nothing measurable (fewer envs: a fresher policy per step).

    Serial: the smallest count within 5% of the best time per env step *including the updates*
    (the env is rarely what a serial run waits for). Parallel: the smallest count that needs no
    more sampler processes than the fastest count would to feed the critic.
    """
    rates = {n: r.value for n, r in sorted(env.per_sampler.items())} or {1: env.step_with_policy.value}
    listed = ", ".join(f"{n}: {v:,.0f}/s" for n, v in rates.items())
    if serial:
        delay = config.policy_delay or (2 if config.algo == "td3" else 1)
        learn = utd * (1.0 / point.critic.value + 1.0 / (delay * point.actor.value))
        cost = {n: 1.0 / v + learn for n, v in rates.items()}
        best = min(cost.values())
        n = min(k for k, c in cost.items() if c <= 1.05 * best)
        return n, (f"a serial env step costs {1e3 * cost[n]:.2f} ms with the updates, {1e3 * best:.2f} ms at best: "
                   f"more envs per sampler save under 5% (sampler loop {listed})")
    need = point.critic.value / utd
    fastest = max(rates.values())
    procs = {n: math.ceil(need / v) for n, v in rates.items()}
    floor = min(max_samplers, math.ceil(need / fastest))
    n = min((k for k, p in procs.items() if p <= floor), default=max(rates, key=rates.get))
    return n, f"fewest envs per sampler that feed {need:,.0f} steps/s with {max(floor, 1)} sampler(s) ({listed})"


def _learner_threads(probes: ProbeResults, cores: int, spare: int, cpu_learners: int) -> tuple[int, str]:
    """Threads for a CPU learner given ``spare`` idle cores, if the all-cores curve beat one thread."""
    many_curve, one_curve = probes.curve("cpu", cores), probes.curve("cpu", 1)
    if cores < 2 or not many_curve or not one_curve or not many_curve.points or not one_curve.points:
        return 1, "one thread: no multi-thread update rates were measured"
    # the median ratio over the batch sizes both curves have: one noisy point must not decide
    ratios = sorted(m.critic.value / o.critic.value for m in many_curve.points
                    if (o := one_curve.point(m.batch_size)) is not None and o.critic.value > 0)
    if not ratios:
        return 1, "one thread: the 1-thread and all-core curves share no batch size"
    gain = ratios[len(ratios) // 2]
    b = f"{len(ratios)} batch size(s)"
    if gain < THREAD_GAIN:
        return 1, (f"{cores} threads measured {gain:.2f}x one thread over {b} (oversubscribed, or a network "
                   "too small to split): one thread")
    threads = 1 + spare // cpu_learners
    return threads, f"{cores} threads measured {gain:.2f}x one thread over {b}; {spare} core(s) are spare"


def _predict(out: _Layout, point: UpdatePoint, critic_hz: float, sampler_hz: float, samplers: int, utd: float,
             threads: int, cpu_learners: int, cores: int, delay: int) -> None:
    """Expected rates of a layout, CPU contention included.

    Serial: one env step and its updates in turn. Parallel: the critic's rate, capped by what the
    samplers deliver; a sampler paced to the learners uses only its duty cycle (needed steps/s over
    the steps/s it can make) of a core, so it counts as busy only from half a core up. When the
    expected CPU demand exceeds the cores, every rate shrinks in proportion.
    """
    if out.serial:
        per_step = 1.0 / sampler_hz + utd * (1.0 / point.critic.value + 1.0 / (delay * point.actor.value))
        update_hz = utd / per_step
        demand, busy = float(threads), 1
    else:
        update_hz = min(critic_hz, samplers * sampler_hz * utd)
        duty = min(1.0, update_hz / utd / (samplers * sampler_hz))
        learner_cores = cpu_learners * threads + (PARALLEL_LEARNERS - cpu_learners)  # a GPU learner's launcher: 1
        demand = learner_cores + samplers * duty
        busy = PARALLEL_LEARNERS + (samplers if duty >= 0.5 else 0)
        update_hz *= min(1.0, cores / demand)
        out.busy_note = (f"{samplers} sampler(s) at {duty:.0%} of a core each beside {PARALLEL_LEARNERS} learners: "
                         f"{demand:.2f} cores of work on {cores}")
        if busy > cores:
            out.violation = f"{busy} busy processes on {cores} core(s)"
    out.predicted = {"sample_hz": update_hz / utd, "update_hz": update_hz, "update_frames_hz": update_hz * point.batch_size,
                     "busy_processes": float(busy), "cpu_demand": demand, "cores": float(cores)}


def _plan_memory(plan: Plan, probes: ProbeResults, config: Any, choose: Any, samplers: int, serial: bool) -> None:
    hw, env = probes.hardware, probes.env
    width = 2 * env.obs_dim + env.act_dim + 3
    # the parallel mode sizes rings from its pacing lead (how far samplers may run ahead of the
    # learners); the plan reports that size and counts its memory rather than inventing another
    from spreeze_like.procs import pacing

    n_envs = int(plan.choices["envs_per_sampler"].value)
    lead = pacing.default_lead(samplers, n_envs)
    ring = pacing.ring_capacity(lead, n_envs)
    ring_bytes = 0 if serial else samplers * ring * width * 4
    processes = 1 if serial else samplers + PARALLEL_LEARNERS + PARALLEL_IDLE
    free = hw.memory_available if serial else min(hw.memory_available, hw.shm_free or hw.memory_available)
    room = max(0.0, MEMORY_FRACTION * (free - processes * PROCESS_BYTES) - ring_bytes)
    row = replay_row_bytes(env.obs_dim, env.act_dim, bool(config.prioritized))
    fits = int(room // row)
    want = min(int(config.buffer_size), max(int(config.total_steps), 1))
    where = "memory" if serial else "/dev/shm"
    if want <= fits:
        reason = (f"the run's {config.total_steps:,} steps (at most the configured {config.buffer_size:,}): "
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
