"""One run layout (serial or parallel): batch size, envs per sampler, samplers, threads, expected rates.

:func:`plan_layout` applies rules 3-5 of :mod:`spreeze_like.autotune.plan` for one mode; the planner
calls it for both modes and keeps the one with the higher expected update frames/s. Like the
planner, everything here is a pure function of the probe results and the config.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from spreeze_like.autotune.results import (
    EnvRates,
    ProbeResults,
    UpdateCurve,
    UpdatePoint,
)
from spreeze_like.errors import ConfigError

DOUBLING_GAIN = 1.5  # a batch doubling must buy this many times the update frames/s
BATCH_CAP = 8192  # the largest batch planned (the benchmark grid tops at 4096; larger is untested here)
GPU_MEMORY_FRACTION = 0.8  # of a GPU's memory a planned batch's measured peak may use
THREAD_GAIN = 1.10  # all-core updates must beat 1 thread by this much to get the spare cores
PARALLEL_LEARNERS = 2  # critic learner + actor learner: busy processes


def allowed_points(curve: UpdateCurve, memory_total: int) -> list[UpdatePoint]:
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


@dataclass
class Ctx:
    """What every layout needs: the probes, the config, the user's fields and the devices."""

    probes: ProbeResults
    config: Any
    mine: set[str]
    critic_dev: str
    actor_dev: str

    def fixed(self, name: str, planned: Any) -> Any:
        return getattr(self.config, name) if name in self.mine else planned


@dataclass
class Layout:
    """One mode's settings (value, reason) and its predicted rates."""

    serial: bool
    choices: dict[str, tuple[Any, str]] = field(default_factory=dict)
    predicted: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    violation: str = ""  # a rule this layout breaks (only possible when the user fixed a setting)
    busy_note: str = ""


def plan_layout(ctx: Ctx, serial: bool) -> Layout:
    """Batch, envs per sampler, samplers and threads for one mode (steps 3-5 of the module docstring)."""
    probes, config = ctx.probes, ctx.config
    hw, env = probes.hardware, probes.env
    cores, utd = hw.usable_cores, float(config.utd)
    delay = config.policy_delay or (2 if config.algo == "td3" else 1)
    out = Layout(serial)
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
    points = allowed_points(curve, memory_total) or curve.points[:1]
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


def _predict(out: Layout, point: UpdatePoint, critic_hz: float, sampler_hz: float, samplers: int, utd: float,
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
