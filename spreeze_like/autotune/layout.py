"""One run layout (serial or parallel): batch size, UTD, envs per sampler, samplers, threads, expected rates.

:func:`plan_layout` applies rules 3-5 of :mod:`spreeze_like.autotune.plan` for one mode; the planner
calls it for both modes and keeps the one with the higher expected update frames/s. The batch and
UTD come from the learning-speed rule of :mod:`spreeze_like.autotune.replay_ratio`, the samplers
from what :mod:`spreeze_like.autotune.sampler_supply` says they make. Like the planner, everything
here is a pure function of the probe results and the config.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from spreeze_like.autotune import sampler_supply
from spreeze_like.autotune.replay_ratio import (
    FEED_TIE,
    REPLAY_RATIO_MAX,
    REPLAY_RATIO_TARGET,
    Feed,
    choose_feed,
    in_band,
    min_utd,
    preference,
    ratio_reason,
    serial_ratio,
)
from spreeze_like.autotune.results import (
    EnvRates,
    ProbeResults,
    UpdateCurve,
    UpdatePoint,
)
from spreeze_like.config import default_policy_delay
from spreeze_like.errors import ConfigError

DOUBLING_GAIN = 1.5  # a batch doubling must buy this many times the update frames/s
BATCH_CAP = 8192  # the largest batch planned (the benchmark grid tops at 4096; larger is untested here)
GPU_MEMORY_FRACTION = 0.8  # of a GPU's memory a planned batch's measured peak may use
THREAD_GAIN = 1.10  # all-core updates must beat 1 thread by this much to get the spare cores
PARALLEL_LEARNERS = 2  # critic learner + actor learner: busy processes
# From this many cores on, one is left to the roles that are busy now and then: the critic learner's
# ring-draining feeder thread, the evaluator during an evaluation, the monitor and the supervisor.
SUPPORT_CORE_FROM = 8
# Samplers are planned for this much more than the critic learns from: a run's samplers share the memory
# bus and wake in bursts; paced to the learners, the extra ones cost only their duty cycle.
SUPPLY_HEADROOM = 1.25


def max_samplers(cores: int) -> int:
    """The most sampler processes a plan runs on ``cores`` (the learners' cores and a support core left)."""
    return max(1, cores - PARALLEL_LEARNERS - (1 if cores >= SUPPORT_CORE_FROM else 0))


def allowed_points(curve: UpdateCurve, memory_total: int) -> list[UpdatePoint]:
    points = [p for p in curve.points if p.batch_size <= BATCH_CAP]
    if memory_total:
        points = [p for p in points if p.peak_memory <= GPU_MEMORY_FRACTION * memory_total]
    return sorted(points, key=lambda p: p.batch_size)


def knee_batch(points: list[UpdatePoint], serial: bool, cpu: bool = False) -> tuple[UpdatePoint, str]:
    """Double while a doubling gives >= DOUBLING_GAIN x the frames/s; returns the point and the evidence.

    ``cpu``: the learner is on the CPU, where the knee is the smallest measured batch (SAC's 256). At the same
    replay ratio a larger batch there means proportionally fewer gradient steps, and every CPU grid so far
    (HalfCheetah-v5, 2-core machines, 2026-11-21 to 2026-12-02, BENCHMARKS.md "Autotune") learned less in the
    wall time with it: batch 512 at UTD 0.5 made 75% of 256's progress (median of 3 rounds), 1024 at 0.25 26-57%.
    The probes' 256 -> 512 gains there (1.16-1.55x the frames/s) straddle DOUBLING_GAIN, and the runs' own gain
    was 0.96-1.31x (median 1.18x): a knee read from the probe followed its noise.
    """
    if cpu:
        return points[0], (f"learners on the CPU keep batch {points[0].batch_size}: at the same replay ratio a larger "
                           "batch makes fewer gradient steps, and learned less in the wall time in every CPU grid")

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
    """Batch, UTD, envs per sampler, samplers and threads for one mode (steps 3-5 of the plan's docstring)."""
    probes, config = ctx.probes, ctx.config
    hw, env = probes.hardware, probes.env
    cores = hw.usable_cores
    delay = config.policy_delay or default_policy_delay(config.algo)
    out = Layout(serial)
    gpus = {g.device: g for g in hw.gpus}
    cpu_learners = sum(d == "cpu" for d in (ctx.critic_dev, ctx.actor_dev))
    limit = max_samplers(cores)
    least = min_utd(config.total_steps)
    user_utd = float(config.utd) if "utd" in ctx.mine else None
    user_batch = int(config.batch_size) if "batch_size" in ctx.mine else None

    # threads of a serial CPU learner are settled first: they pick the curve the batch is read from
    threads, thread_reason = 1, "learners on GPUs: their CPU side only launches kernels"
    if serial and cpu_learners:
        threads, thread_reason = _learner_threads(probes, cores, cores - 1, 1)
    threads = ctx.fixed("torch_threads", threads)
    dev = ctx.critic_dev
    curve = probes.curve(dev, threads if dev == "cpu" else None) or probes.curve(dev)
    if curve is None or not curve.points:
        raise ConfigError(f"no update rates were measured on {dev}; rerun with --reprobe")

    # 3. batch size and UTD: the knee bounds the batch, the replay-ratio rule picks within
    memory_total = gpus[dev].total_memory if dev in gpus else 0
    points = allowed_points(curve, memory_total) or curve.points[:1]
    knee, evidence = knee_batch(points, serial, cpu=dev == "cpu")
    if user_batch is not None:  # the user's size, with the rates of the nearest measured one
        measured = curve.point(user_batch) or _nearest(curve, user_batch)
        candidates = [dataclasses.replace(measured, batch_size=user_batch)]
    else:
        candidates = [p for p in points if p.batch_size <= knee.batch_size]

    def critic_rate(point: UpdatePoint) -> float:
        if serial:
            return point.critic.value
        if ctx.critic_dev == ctx.actor_dev and dev != "cpu":
            # both learners take turns on one GPU: the critic gets the device between the actor's updates
            return 1.0 / (1.0 / point.critic.value + 1.0 / (delay * point.actor.value))
        return min(point.critic.value, delay * point.actor.value)  # the critic waits for a slower actor (pacing)

    if user_batch is not None and memory_total:  # a planned batch is within the memory limit by construction
        if user_batch > max(p.batch_size for p in curve.points):
            out.notes.append(f"batch {user_batch} is beyond the largest size measured on {dev}; it may not fit")
        elif candidates[0].peak_memory > GPU_MEMORY_FRACTION * memory_total:
            out.notes.append(f"batch {user_batch} needs about {candidates[0].peak_memory / 2**30:.1f} GiB on {dev} "
                             f"({memory_total / 2**30:.1f} GiB total)")
    if serial:
        point, ratio, utd, why = _serial_feed(candidates, env, least, user_utd, delay)
        reason = f"{dev}: {evidence}" if point.batch_size == knee.batch_size else (
            f"{dev}: the largest batch up to the knee ({knee.batch_size}) that keeps the run's updates in the band "
            f"learns from the most env steps/s")
        out.choices["batch_size"] = (point.batch_size, reason)
        out.choices["utd"] = (utd, ratio_reason(ratio, why, gpu_learners=not cpu_learners, spare_cores=0,
                                                least_utd=least, total_steps=config.total_steps, supply_hz=0.0,
                                                data_hz=0.0))
        n_envs, n_reason = _serial_envs_per_sampler(env, point, utd, delay)
        n_envs = ctx.fixed("envs_per_sampler", n_envs)
        out.choices["envs_per_sampler"] = (n_envs, n_reason)
        samplers = ctx.fixed("samplers", 1)
        out.choices["samplers"] = (samplers,
                                   "serial mode steps its samplers in turn in one process: more only adds envs")
        sampler_hz = (env.per_sampler.get(n_envs) or env.step_with_policy).value
        out.choices["torch_threads"] = (threads, thread_reason)
        _predict_serial(out, point, sampler_hz, utd, threads, cores, delay)
        return out

    if ctx.critic_dev == ctx.actor_dev and dev != "cpu":
        out.notes.append(f"both learners share {dev}: the expected critic rate counts the actor's turns")
    user_n = int(config.samplers) if "samplers" in ctx.mine else None
    user_k = int(config.envs_per_sampler) if "envs_per_sampler" in ctx.mine else None
    capacity = sampler_supply.best_setup(env, limit, user_n, user_k)
    # The lowest R the plan takes: SAC's tuned ratio, with GPU learners too. It was the band's floor (128) for
    # GPU learners with idle cores until the H200 grid of 2026-11-28 (BENCHMARKS.md, Autotune): both R-128 runs
    # (the autotuned one among them, 81% of the best) learned less in 90 s than the R-256 runs with many samplers.
    floor = REPLAY_RATIO_TARGET
    feed = choose_feed([(p, critic_rate(p)) for p in candidates], capacity.steps_hz, floor, least, user_utd)
    if not in_band(feed.ratio):
        out.notes.append(f"replay ratio {feed.ratio:,.0f} (batch {feed.batch_size} x UTD {feed.utd:g}) is outside the "
                         "band the plan keeps; learning per env step may suffer")
    out.choices["batch_size"] = (feed.batch_size, _batch_reason(dev, feed, capacity, knee, evidence))
    out.choices["utd"] = (feed.utd, ratio_reason(feed.ratio, feed.limit, gpu_learners=not cpu_learners,
                                                 spare_cores=limit, least_utd=least, total_steps=config.total_steps,
                                                 supply_hz=capacity.steps_hz, data_hz=feed.data_hz))

    # 4. samplers x envs per sampler: the fewest processes that feed the critic, with headroom
    want = SUPPLY_HEADROOM * feed.data_hz
    setup = sampler_supply.setup_for(env, want, limit, user_n, user_k)
    listing = ", ".join(f"{k}: {sampler_supply.supply(env, setup.samplers, k).steps_hz:,.0f}/s"
                        for k in sampler_supply.envs_options(env))
    out.choices["envs_per_sampler"] = (setup.envs_per_sampler,
                                       (f"fewest processes, then fewest envs each, that make {want:,.0f} env steps/s "
                                        f"({setup.samplers} sampler(s) with k envs: {listing})"))
    out.choices["samplers"] = (setup.samplers,
                               (f"{setup.text} for the {feed.data_hz:,.0f}/s the critic learns from, +"
                                f"{SUPPLY_HEADROOM - 1:.0%}; the cores allow {limit} ({capacity.text})"))
    note = sampler_supply.scaling_note(env, setup)
    if note:
        out.notes.append(note)

    # 5. threads of parallel CPU learners: the cores the samplers leave, if more threads measured faster
    duty = min(1.0, feed.data_hz / setup.steps_hz) if setup.steps_hz > 0 else 1.0
    if cpu_learners:
        spare = int(cores - PARALLEL_LEARNERS - math.ceil(setup.samplers * duty))
        threads, thread_reason = ((1, "one thread each: samplers and learners already fill the cores") if spare <= 0
                                  else _learner_threads(probes, cores, spare, cpu_learners))
        threads = ctx.fixed("torch_threads", threads)
    out.choices["torch_threads"] = (threads, thread_reason)
    _predict_parallel(out, feed, setup, capacity.steps_hz, threads, cpu_learners, cores)
    return out


def _batch_reason(dev: str, feed: Feed, capacity: sampler_supply.SamplerSetup, knee: UpdatePoint,
                  evidence: str) -> str:
    frames = feed.critic_hz * feed.batch_size
    head = (f"{dev}: {feed.critic_hz:,.0f} critic updates/s x {feed.batch_size} = {frames:,.0f} frames/s learn from "
            f"{feed.data_hz:,.0f} env steps/s at R {feed.ratio:,.0f}, the most of any batch up to the knee "
            f"({knee.batch_size})")
    if feed.limit in ("balanced", "ceiling"):
        return (f"{head}; the samplers make at most {capacity.steps_hz:,.0f}/s, so a larger batch would only "
                "re-read the same data")
    return f"{head}; knee: {evidence}"


def _serial_feed(candidates: list[UpdatePoint], env: EnvRates, least: float, user_utd: float | None,
                 delay: int) -> tuple[UpdatePoint, float, float, str]:
    """Serial mode's batch and ratio: the most env steps/s learned from, one process stepping and updating in turn.

    The ratio is the target (one process: no idle resource to trade for data), raised where the run
    length needs it; batches that cannot give the run its updates inside the band are skipped.
    Returns (point, ratio, utd, what set the ratio).
    """
    env_hz = max((r.value for r in env.per_sampler.values()), default=env.step_with_policy.value)
    options = []
    for point in candidates:
        ratio, utd, why = serial_ratio(point.batch_size, least, user_utd)
        fits = in_band(ratio) if user_utd is not None else point.batch_size * least <= REPLAY_RATIO_MAX * 1.001
        per_step = 1.0 / env_hz + utd * (1.0 / point.critic.value + 1.0 / (delay * point.actor.value))
        options.append((fits, 1.0 / per_step, point, ratio, utd, why))
    fitting = [o for o in options if o[0]] or [min(options, key=lambda o: o[2].batch_size)]
    best = max(o[1] for o in fitting)
    ties = [o for o in fitting if o[1] >= (1.0 - FEED_TIE) * best]
    _, _, point, ratio, utd, why = min(ties, key=lambda o: preference(o[3], o[2].batch_size))
    return point, ratio, utd, why


def _nearest(curve: UpdateCurve, batch: int) -> UpdatePoint:
    return min(curve.points, key=lambda p: abs(math.log2(p.batch_size) - math.log2(max(batch, 1))))


def _serial_envs_per_sampler(env: EnvRates, point: UpdatePoint, utd: float, delay: int) -> tuple[int, str]:
    """Serial mode: the fewest envs per sampler within 5% of the best time per env step *with the updates*.

    The env is rarely what a serial run waits for; fewer envs step each with a fresher policy.
    """
    rates = {n: r.value for n, r in sorted(env.per_sampler.items())} or {1: env.step_with_policy.value}
    listed = ", ".join(f"{n}: {v:,.0f}/s" for n, v in rates.items())
    learn = utd * (1.0 / point.critic.value + 1.0 / (delay * point.actor.value))
    cost = {n: 1.0 / v + learn for n, v in rates.items()}
    best = min(cost.values())
    n = min(k for k, c in cost.items() if c <= 1.05 * best)
    return n, (f"a serial env step costs {1e3 * cost[n]:.2f} ms with the updates, {1e3 * best:.2f} ms at best: "
               f"more envs per sampler save under 5% (sampler loop {listed})")


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


def _predict_serial(out: Layout, point: UpdatePoint, sampler_hz: float, utd: float, threads: int, cores: int,
                    delay: int) -> None:
    """Serial mode's expected rates: one env step and its share of updates, in turn, in one process."""
    per_step = 1.0 / sampler_hz + utd * (1.0 / point.critic.value + 1.0 / (delay * point.actor.value))
    update_hz = utd / per_step
    out.predicted = {"sample_hz": update_hz / utd, "update_hz": update_hz,
                     "update_frames_hz": update_hz * point.batch_size, "replay_ratio": utd * point.batch_size,
                     "utd": utd, "sampler_capacity_hz": sampler_hz, "max_sampler_hz": sampler_hz, "busy_processes": 1.0, "cpu_demand": float(threads),
                     "cores": float(cores)}


def _predict_parallel(out: Layout, feed: Feed, setup: sampler_supply.SamplerSetup, max_supply_hz: float, threads: int,
                      cpu_learners: int, cores: int) -> None:
    """Expected rates of a parallel layout, CPU contention included.

    The critic's rate, capped by what the samplers deliver at the planned UTD; a sampler paced to
    the learners uses only its duty cycle (needed steps/s over the steps/s it can make) of a core,
    so it counts as busy only from half a core up. When the expected CPU demand exceeds the cores,
    every rate shrinks in proportion.
    """
    samplers, utd = setup.samplers, feed.utd
    update_hz = min(feed.critic_hz, setup.steps_hz * utd)
    duty = min(1.0, update_hz / utd / setup.steps_hz) if setup.steps_hz > 0 else 1.0
    learner_cores = cpu_learners * threads + (PARALLEL_LEARNERS - cpu_learners)  # a GPU learner's launcher: 1
    demand = learner_cores + samplers * duty
    busy = PARALLEL_LEARNERS + (samplers if duty >= 0.5 else 0)
    update_hz *= min(1.0, cores / demand)
    out.busy_note = (f"{samplers} sampler(s) at {duty:.0%} of a core each beside {PARALLEL_LEARNERS} learners: "
                     f"{demand:.2f} cores of work on {cores}")
    if busy > cores:
        out.violation = f"{busy} busy processes on {cores} core(s)"
    out.predicted = {"sample_hz": update_hz / utd, "update_hz": update_hz,
                     "update_frames_hz": update_hz * feed.batch_size, "replay_ratio": feed.ratio, "utd": utd,
                     "sampler_capacity_hz": setup.steps_hz, "max_sampler_hz": max_supply_hz,
                     "busy_processes": float(busy), "cpu_demand": demand, "cores": float(cores)}
