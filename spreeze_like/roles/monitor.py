"""Monitor role (``monitor``): turns the roles' stats into TensorBoard scalars and a progress line.

Roles only push numbers into their stats blocks (counters, mean accumulators, gauges; see
:mod:`spreeze_like.metrics`). The :class:`Monitor` reads every block at a fixed period
(``tb_interval`` seconds), turns counter deltas into rates and mean-accumulator deltas into means
over the period, and writes them with one :class:`~spreeze_like.event_writer.EventWriter` at the
current global env step. So a learner's logging cost is a few float adds per update, whatever the
TensorBoard rate.

It owns the run's event files (``EventWriter(run_dir)``; closed by :meth:`close`), and nothing
shared. On resume it is created with ``purge_step`` = the checkpoint's env step + 1, so TensorBoard
drops the points the previous session wrote after that checkpoint and the curve continues.

``start_step`` is the env step this session starts from; the samplers' ``env_steps`` counters
count this session's steps only, so the global step is ``start_step + sum(env_steps)``.

It also owns the run's learning curves, ``curves.csv`` (:mod:`spreeze_like.curves`): a ``train``
row per write that saw episodes end (their mean and count) and an ``eval`` row per evaluation, at
the seconds since ``session_start``; and it writes the custom-scalars layout (:data:`SCALARS_LAYOUT`)
once per session, so TensorBoard's "Custom Scalars" tab opens with the main charts grouped.

With remote samplers (``remote_samplers`` > 0 in the config) it adds, per remote row,
``remote/sampler-<i>/steps_per_s``, ``remote/sampler-<i>/policy_lag`` and
``remote/sampler-<i>/restarts`` (from the rows the Ray bridge writes), the node of each as text
when it changes (read from ``remote_samplers.json``,
:func:`~spreeze_like.remote.info_file.read_remote_info`), and the "Remote samplers" chart group.

A write that fails (a full disk) never raises out of the monitor: the event writer and the curve
writer each say so in one line through ``print_fn`` and retry once a minute (review finding 7).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import psutil

from spreeze_like.curves import CurveWriter
from spreeze_like.procs.pacing import session_learn_after
from spreeze_like.remote.info_file import read_remote_info

_GiB = float(2**30)


def _exact(*tags: str) -> list[str]:
    return [f"^{tag}$" for tag in tags]


# The custom-scalars dashboard: {group: {chart: [tag regex, ...]}} (tags as docs/trainer.md lists them).
SCALARS_LAYOUT: dict[str, dict[str, list[str]]] = {
    "Returns": {
        "episodic return (train, eval)": _exact("charts/episodic_return", "eval/episodic_return"),
        "episode length (train, eval)": _exact("charts/episodic_length", "eval/episodic_length"),
    },
    "Speed": {
        "env steps/s (SPS since start, sample Hz per period)": _exact("charts/SPS", "perf/sample_hz"),
        "updates/s (critic, actor)": _exact("perf/update_hz", "perf/actor_update_hz"),
        "update frames/s": _exact("perf/update_frames_hz"),
        "achieved UTD": _exact("perf/utd"),
    },
    "Losses": {
        "critic loss": _exact("losses/qf1_loss", "losses/qf2_loss"),
        "Q values": _exact("losses/qf1_values"),
        "actor loss": _exact("losses/actor_loss"),
        "alpha, alpha loss": _exact("losses/alpha", "losses/alpha_loss"),
    },
    "Policy lag": {
        "policy lag (actor versions behind, samplers)": _exact("perf/policy_lag"),
        "weight staleness (board versions)": _exact("perf/weight_staleness", "perf/actor_copy_staleness",
                                                    "perf/critic_copy_staleness"),
    },
}
# Charts only the parallel mode has data for (procs.monitor_proc.ParallelScalars).
PARALLEL_LAYOUT: dict[str, dict[str, list[str]]] = {
    "Pipeline": {
        "critic learner time (busy, waiting for data, waiting for the actor)": _exact(
            "perf/critic_busy", "perf/critic_data_wait", "perf/critic_actor_wait"),
        "sampler pace wait": _exact("perf/sampler_pace_wait"),
        "ring fill, ring-full waits": _exact("ipc/ring_fill", "ipc/ring_full_waits"),
    },
}


# Charts of a run with remote samplers (--remote-samplers): one line per remote sampler row.
REMOTE_LAYOUT: dict[str, dict[str, list[str]]] = {
    "Remote samplers": {
        "env steps/s per remote sampler": [r"^remote/sampler-\d+/steps_per_s$"],
        "policy lag per remote sampler (actor versions behind)": [r"^remote/sampler-\d+/policy_lag$"],
        "restarts per remote sampler": [r"^remote/sampler-\d+/restarts$"],
    },
}


def scalars_layout(parallel: bool, remote: bool = False) -> dict[str, dict[str, list[str]]]:
    return {**SCALARS_LAYOUT, **(PARALLEL_LAYOUT if parallel else {}), **(REMOTE_LAYOUT if remote else {})}


def curves_meta(config: Mapping[str, Any]) -> dict[str, Any]:
    """How ``curves.csv`` names one of our runs."""
    serial = bool(config.get("serial", True))
    meta = {"system": "spreeze_like", "mode": "serial" if serial else "parallel", "env": config.get("env"),
            "algo": config.get("algo"), "seed": config.get("seed")}
    if config.get("env_kwargs"):  # another env under the same id: the curve says so (absent: none)
        meta["env_kwargs"] = dict(config["env_kwargs"])
    return meta


def _mean(now: Mapping[str, float], before: Mapping[str, float], key: str) -> float | None:
    count = now.get(key + ".count", 0.0) - before.get(key + ".count", 0.0)
    if count <= 0:
        return None
    return (now[key + ".sum"] - before.get(key + ".sum", 0.0)) / count


class Monitor:
    """See the module docstring.

    Args:
        run_dir: the run folder; event files go straight into it.
        snapshot: returns every role's stats by role name (``sampler-0``, ``critic-learner``, ...):
            ``LocalStatsBlock.snapshot`` in serial mode, ``ipc.StatsBlock.snapshot`` in parallel.
        config: the resolved config as a dict (written once as TensorBoard text).
        total_steps: env steps of the whole run (for the ETA).
        start_step: env step at which this session starts (0, or the resumed checkpoint's).
        tb_interval: seconds between TensorBoard writes.
        log_interval: seconds between console lines (0: none).
        purge_step: on resume, the step from which old events are discarded (and curve rows past
            ``purge_step - 1`` dropped).
        print_fn: where the console line goes.
        clock: monotonic seconds (tests pass a fake).
        session_start: ``clock()`` value at which this session started, the zero of ``wall_s`` in
            ``curves.csv`` (default: now).
    """

    def __init__(
        self,
        run_dir: str | Path,
        snapshot: Callable[[], Mapping[str, Mapping[str, float]]],
        config: Mapping[str, Any],
        total_steps: int,
        start_step: int = 0,
        tb_interval: float = 2.0,
        log_interval: float = 10.0,
        purge_step: int | None = None,
        print_fn: Callable[[str], None] = print,
        clock: Callable[[], float] = time.monotonic,
        session_start: float | None = None,
        preloaded: int = 0,
    ) -> None:
        from spreeze_like.event_writer import EventWriter

        self.snapshot, self.total_steps, self.start_step = snapshot, total_steps, start_step
        self.tb_interval, self.log_interval, self.print_fn, self.clock = tb_interval, log_interval, print_fn, clock
        # a full disk is one warning line through print_fn per file, never an exception (finding 7)
        self.writer = EventWriter(run_dir, purge_step=purge_step, warn=print_fn, create=False)
        self.writer.add_text("hyperparameters", _markdown_table(config), start_step)
        self.writer.add_text(
            "config", "```\n" + json.dumps(dict(config), indent=2, sort_keys=True) + "\n```", start_step
        )
        # remote sampler rows: sampler-<samplers> .. sampler-<samplers + remote_samplers - 1> (config.sampler_rows)
        self.run_dir = Path(run_dir)
        self.remote_rows = [f"sampler-{i}" for i in range(int(config.get("samplers", 1)),
                                                           int(config.get("samplers", 1))
                                                           + int(config.get("remote_samplers", 0) or 0))]
        self.remote_nodes: dict[str, str] = {}  # row -> node last written as text
        self.writer.add_scalars_layout(scalars_layout(parallel=not config.get("serial", True),
                                                      remote=bool(self.remote_rows)), start_step)
        self.t0 = self.t_last = self.t_console = clock()
        self.session_start = self.t0 if session_start is None else session_start
        self.curves = CurveWriter(run_dir, curves_meta(config), None if purge_step is None else purge_step - 1,
                                  warn=print_fn)
        self.eval_episodes = int(config.get("eval_episodes", 1))
        self.before = self._read()
        # updates start once this session stored this many (the pacing rule, shared with serial mode); rows a
        # resume loaded into replay (--save-replay) count toward it
        self.learn_after = session_learn_after(int(config.get("batch_size", 1)), int(config.get("learning_starts", 0)),
                                               preloaded)
        self.sample_hz_ema: float | None = None
        self.recent_return: float | None = None
        self.last_eval: float | None = None
        self.last_success: float | None = None  # the last evaluation's success rate, where the env says it
        self._evaluations = 0.0
        psutil.cpu_percent(interval=None)  # prime: the first real call reports use since now

    # --- reading ------------------------------------------------------------------------------------------
    def _read(self) -> dict[str, dict[str, float]]:
        return {role: dict(values) for role, values in self.snapshot().items()}

    def _sum(self, snap: Mapping[str, Mapping[str, float]], prefix: str, key: str) -> float:
        return sum(v.get(key, 0.0) for r, v in snap.items() if r.startswith(prefix))

    def global_step(self, snap: Mapping[str, Mapping[str, float]] | None = None) -> int:
        snap = self._read() if snap is None else snap
        return self.start_step + int(self._sum(snap, "sampler", "env_steps"))

    # --- writing ------------------------------------------------------------------------------------------
    def poll(self, force: bool = False) -> bool:
        """Write if ``tb_interval`` has passed (or ``force``); returns whether it wrote."""
        now = self.clock()
        if not force and now - self.t_last < self.tb_interval:
            return False
        self.write(now)
        return True

    def write(self, now: float | None = None) -> None:
        now = self.clock() if now is None else now
        snap, before = self._read(), self.before
        dt = max(now - self.t_last, 1e-9)
        step = self.global_step(snap)
        scalars: dict[str, float] = {}

        def rate(prefix: str, key: str) -> float:
            return (self._sum(snap, prefix, key) - self._sum(before, prefix, key)) / dt

        samplers = [r for r in snap if r.startswith("sampler")]
        episodes = _pooled_count(snap, before, samplers, "episodic_return")
        for tag, key in (
            ("charts/episodic_return", "episodic_return"),
            ("charts/episodic_length", "episodic_length"),
            ("perf/policy_lag", "policy_lag"),
            ("charts/success_rate", "episodic_success"),  # only where the env says (goal envs): no count, no point
        ):
            value = _pooled_mean(snap, before, samplers, key)
            if value is not None:
                scalars[tag] = value
        if "charts/episodic_return" in scalars:
            self.recent_return = scalars["charts/episodic_return"]
            self.curves.add("train", now - self.session_start, step, self.recent_return, int(episodes),
                            scalars.get("charts/success_rate"))
        sample_hz = rate("sampler", "env_steps")
        scalars["perf/sample_hz"] = sample_hz
        self.sample_hz_ema = sample_hz if self.sample_hz_ema is None else 0.7 * self.sample_hz_ema + 0.3 * sample_hz
        scalars["charts/SPS"] = (step - self.start_step) / max(now - self.t0, 1e-9)
        scalars["samplers/nonfinite_dropped"] = self._sum(snap, "sampler", "nonfinite_dropped")
        for name in ("nstep_dropped", "her_rows"):  # --n-step and --her-goals runs only (roles/nstep.py, her.py)
            total = self._sum(snap, "sampler", name)
            if total:
                scalars[f"samplers/{name}"] = total
        scalars["stats/nonfinite_steps"] = sum(snap.get(r, {}).get("nonfinite_steps", 0.0)
                                               for r in ("critic-learner", "actor-learner"))
        self._learner_scalars(snap, before, rate, step, scalars)
        if self.remote_rows:
            self._remote_scalars(snap, before, dt, step, scalars)
        if "replay" in snap:
            scalars["replay/size"] = snap["replay"].get("size", 0.0)
        scalars["hw/cpu_percent"] = psutil.cpu_percent(interval=None)
        scalars["hw/mem_used"] = psutil.virtual_memory().used / _GiB
        for tag, value in scalars.items():
            self.writer.add_scalar(tag, value, step)
        self._eval_scalars(snap, now)
        self.before, self.t_last = snap, now
        if self.log_interval > 0 and now - self.t_console >= self.log_interval:
            self.t_console = now
            self.print_fn(self.progress_line(step, scalars))

    def _learner_scalars(
        self, snap: Any, before: Any, rate: Callable[[str, str], float], step: int, scalars: dict[str, float]
    ) -> None:
        critic, actor = snap.get("critic-learner"), snap.get("actor-learner")
        if critic is not None:
            scalars["perf/update_hz"] = rate("critic-learner", "updates")
            scalars["perf/update_frames_hz"] = rate("critic-learner", "update_frames")
            updates = critic.get("updates", 0.0)  # this session's
            if updates > 0:
                # the data that earned updates: this session's steps from the one that reached learn_after
                scalars["perf/utd"] = updates / max(1, step - self.start_step - self.learn_after + 1)
            for key in ("qf1_loss", "qf2_loss", "qf1_values", "alpha", "alpha_loss"):
                value = _mean(critic, before.get("critic-learner", {}), key)
                if value is not None:
                    scalars[f"losses/{key}"] = value
            for tag, key in (
                ("replay/td_error", "td_error"),
                ("replay/is_weight_mean", "is_weight"),
                ("perf/actor_copy_staleness", "copy_staleness"),
            ):
                value = _mean(critic, before.get("critic-learner", {}), key)
                if value is not None:
                    scalars[tag] = value
        if actor is not None:
            scalars["perf/actor_update_hz"] = rate("actor-learner", "updates")
            for tag, key in (("losses/actor_loss", "actor_loss"), ("perf/critic_copy_staleness", "copy_staleness")):
                value = _mean(actor, before.get("actor-learner", {}), key)
                if value is not None:
                    scalars[tag] = value
        staleness = [scalars[t] for t in ("perf/actor_copy_staleness", "perf/critic_copy_staleness") if t in scalars]
        if staleness:
            scalars["perf/weight_staleness"] = max(staleness)

    def _remote_scalars(self, snap: Any, before: Any, dt: float, step: int, scalars: dict[str, float]) -> None:
        """``remote/sampler-<i>/*`` for each remote row, and its node as text when it changes.

        From the row the bridge writes: steps/s is its ``env_steps`` rate over the period (the
        definition of ``perf/sample_hz``), policy lag its mean over the period (the bridge observes it
        per batch against the newest actor version), restarts its ``remote_restarts``. The policy lag
        of a period in which no batch arrived falls back to remote_samplers.json's figure; the node
        comes from that file only.
        """
        info = read_remote_info(self.run_dir)
        listed = info.get("samplers") if info is not None else None
        listed = listed if isinstance(listed, dict) else {}
        for role in self.remote_rows:
            now_row, then_row = snap.get(role, {}), before.get(role, {})
            entry = listed.get(role) if isinstance(listed.get(role), dict) else {}
            scalars[f"remote/{role}/steps_per_s"] = (now_row.get("env_steps", 0.0) - then_row.get("env_steps", 0.0)) / dt
            lag = _mean(now_row, then_row, "policy_lag")
            if lag is None and isinstance(entry.get("policy_lag"), (int, float)):
                lag = float(entry["policy_lag"])
            if lag is not None:
                scalars[f"remote/{role}/policy_lag"] = lag
            scalars[f"remote/{role}/restarts"] = now_row.get("remote_restarts", 0.0)
            node = entry.get("node_ip")
            if isinstance(node, str) and node and self.remote_nodes.get(role) != node:
                self.remote_nodes[role] = node
                self.writer.add_text(f"remote/{role}/node", f"{node} (node id {entry.get('node_id', '?')})", step)

    @property
    def evaluations_seen(self) -> float:
        return self._evaluations

    def poll_evals(self) -> None:
        """Record a new evaluation now, between writes (the parallel monitor calls it as soon as the
        evaluator's counter moves, so the curve's eval time is not late by up to ``tb_interval``)."""
        self._eval_scalars(self._read(), self.clock())

    def _eval_scalars(self, snap: Mapping[str, Mapping[str, float]], now: float) -> None:
        ev = snap.get("evaluator")
        if ev is None or ev.get("evaluations", 0.0) <= self._evaluations:
            return
        self._evaluations = ev["evaluations"]
        self.last_eval = ev["eval_return"]
        eval_step = int(ev["eval_env_step"])
        self.writer.add_scalar("eval/episodic_return", ev["eval_return"], eval_step)
        self.writer.add_scalar("eval/episodic_length", ev["eval_length"], eval_step)
        self.last_success = ev["eval_success"] if ev.get("eval_success_n", 0.0) > 0 else None  # a goal env says
        if self.last_success is not None:
            self.writer.add_scalar("eval/success_rate", self.last_success, eval_step)
        self.curves.add("eval", now - self.session_start, eval_step, ev["eval_return"], self.eval_episodes,
                        self.last_success)

    def progress_line(self, step: int, scalars: Mapping[str, float]) -> str:
        parts = [f"step {step:,}/{self.total_steps:,} ({100.0 * step / max(1, self.total_steps):.0f}%)"]
        if self.recent_return is not None:
            parts.append(f"return {self.recent_return:.1f}")
        if self.last_eval is not None:
            parts.append(f"eval {self.last_eval:.1f}" + (f" (success {self.last_success:.0%})"
                                                         if self.last_success is not None else ""))
        parts.append(f"sample {scalars.get('perf/sample_hz', 0.0):.0f} Hz")
        parts.append(f"update {scalars.get('perf/update_hz', 0.0):.0f} Hz")
        hz = self.sample_hz_ema or 0.0
        parts.append("ETA " + (_hms((self.total_steps - step) / hz) if hz > 0 else "--"))
        return "[spreeze] " + " | ".join(parts)

    def close(self) -> None:
        """Write a last point at the final step, then close.

        Skipped only when the last point is recent *and* at the final step already (rates over a few
        ms are noise): a short resumed run can reach its last step within a fraction of a second of
        the previous point, and the curve must still end at the run's final step.
        """
        if self.clock() - self.t_last >= 0.5 or self.global_step() != self.global_step(self.before):
            self.write()
        else:
            self._eval_scalars(self._read(), self.clock())
        self.writer.flush()
        self.writer.close()
        self.curves.close()


def _pooled_mean(snap: Any, before: Any, roles: list[str], key: str) -> float | None:
    total = sum(snap[r].get(key + ".sum", 0.0) - before.get(r, {}).get(key + ".sum", 0.0) for r in roles)
    count = sum(snap[r].get(key + ".count", 0.0) - before.get(r, {}).get(key + ".count", 0.0) for r in roles)
    return total / count if count > 0 else None


def _pooled_count(snap: Any, before: Any, roles: list[str], key: str) -> float:
    return sum(snap[r].get(key + ".count", 0.0) - before.get(r, {}).get(key + ".count", 0.0) for r in roles)


def _hms(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def _markdown_table(config: Mapping[str, Any]) -> str:
    rows = "\n".join(f"|{k}|{v}|" for k, v in sorted(config.items()))
    return "|param|value|\n|-|-|\n" + rows
