"""The parallel mode's main process: ``run_parallel(config, context) -> TrainResult``.

The supervisor owns everything a run leaves on the machine:

- **Segments**: it sweeps dead runs' segments at start (saying so), creates every segment of the
  run (:mod:`spreeze_like.procs.segments`, listed in ``<run_dir>/shm.json``) and unlinks them in its
  ``finally``; ``spreeze_like.ipc.segment``'s ``atexit`` hook is the second line. If it is SIGKILLed,
  its reaper (:mod:`spreeze_like.procs.descendants`) unlinks them once the roles are dead; if that
  was killed too, the next start's sweep removes them (their creator's lifetime lock is gone; docs/ipc.md).
- **Processes**: it spawns one process per role (:mod:`spreeze_like.procs.children`), restarts a
  dead sampler, Ray bridge, evaluator or monitor with back-off (counted in ``stats/restarts``), ends the run
  with a clear message if a learner dies or hangs (``--sampler-hang-s`` etc.; a stopped or frozen
  run is paused, not hung: :meth:`Supervisor._check_hangs`), and joins every child at the end
  (SIGTERM, then SIGKILL after a timeout). Children die with it even when it is SIGKILLed
  (parent-death signal). Processes an env started die with the role that made them: it kills them
  after each death of a role, at the end, and through a watcher process if it is SIGKILLed itself
  (:mod:`spreeze_like.procs.descendants`).
- **Files**: ``status.json`` (each role's pid and state, rewritten every second; a failed write is
  one warning line), the assembled checkpoints (:mod:`spreeze_like.procs.parts`), ``shm.json``.

It never initialises CUDA: it builds no tensor and no model (weight-board sizes come from networks
on torch's ``meta`` device), and reads checkpoint parts that the learners moved to the CPU.

Remote samplers (``--ray ADDRESS --remote-samplers R``): sampler rows ``sampler-0 .. sampler-(L-1)``
are local processes, ``sampler-L .. sampler-(L+R-1)`` remote actors that the ``ray-bridge`` child
(:mod:`spreeze_like.procs.ray_bridge_proc`, the only Ray driver) runs and whose rings and rows it
writes. Every row has a ring, a stats row and a quota (the control row's ``quota-<i>``), and counts
in the global step and the end-of-sampling check. The ``--ray`` preflight before any segment, the
quotas, and the hand-over of an abandoned remote sampler's steps: :mod:`spreeze_like.procs.sampler_rows`.

The stop order (done, Ctrl-C, SIGTERM, a failure), last checkpoint, evaluation, joins: :mod:`spreeze_like.procs.shutdown`.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import signal
import sys
import time
from collections.abc import Callable
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any

from spreeze_like.algos.spec import AlgoSpec
from spreeze_like.checkpoint import resume_hint, stop_before_training_says_so
from spreeze_like.config import TrainConfig
from spreeze_like.console import flush_stdout, say
from spreeze_like.early_stop import EarlyStop
from spreeze_like.envs import env_info
from spreeze_like.errors import ShmError, SpreezeError
from spreeze_like.ipc import new_run_id
from spreeze_like.ipc.sweep import sweep_shm
from spreeze_like.procs import pacing
from spreeze_like.procs.children import RESTART_WINDOW_S, RoleProcess, StopSignals, describe_exit
from spreeze_like.procs.control import (
    CONTROL,
    EXIT_ROLE_ERROR,
    EXIT_USER_ERROR,
    RAY_BRIDGE,
    STARTING,
    SUPERVISOR,
    ChildArgs,
    parallel_schema,
    process_start_time,
    set_state,
    take_error_line,
)
from spreeze_like.procs.descendants import Reaper
from spreeze_like.procs.hangs import HangWatch
from spreeze_like.procs.parts import LEARNERS, CheckpointCoordinator
from spreeze_like.procs.sampler_rows import SamplerQuotas, preflight_ray
from spreeze_like.procs.segments import OwnedSegments, RunSegments, vector_sizes
from spreeze_like.procs.shutdown import force_stop, shutdown
from spreeze_like.procs.status import eval_history, trim_eval_history, write_status
from spreeze_like.remote.info_file import read_remote_info
from spreeze_like.remote.sizing import remote_batch_rows
from spreeze_like.replay.persist import resume_replay
from spreeze_like.results import TrainResult
from spreeze_like.rundir import RunContext
from spreeze_like.seeding import derive_seed
from spreeze_like.write_guard import WriteGuard

DEFER_MAX_S = 60.0  # the evaluator and monitor start after the learners' first updates, or after this at the latest
BRIDGE_MODULE = "ray_bridge_proc"  # the ray-bridge's body under spreeze_like.procs (tests name a stand-in)


def run_parallel(config: TrainConfig, context: RunContext, print_fn: Callable[[str], None] = print) -> TrainResult:
    """Train with one process per role; see the module docstring."""
    return Supervisor(config, context, print_fn).run()


class Supervisor:
    """See the module docstring.

    :meth:`tick`, :meth:`global_step`, :meth:`finish_checkpoint` and :meth:`last_checkpoint` are public:
    the end of the run (:mod:`spreeze_like.procs.shutdown`) calls them on this object.
    """

    def __init__(self, config: TrainConfig, context: RunContext, print_fn: Callable[[str], None] = say) -> None:
        self.config, self.context, self._print = config, context, print_fn
        self.run_dir = Path(context.run_dir)
        self.ctx = multiprocessing.get_context("spawn")
        self.run_id = new_run_id()
        self.signals = StopSignals()
        self.children: dict[str, RoleProcess] = {}
        self.owned: OwnedSegments | None = None
        self.preloaded = 0  # replay rows a resume loaded (--save-replay)
        self.state = "starting"
        self.failure: str | None = None
        self.user_error: str | None = None
        self._status_t = 0.0
        self.status_guard = WriteGuard("status.json", "it is stale until a write succeeds (tried every second)",
                                       self.say, retry_s=0.0)
        self.hangs = HangWatch(config, self.say)
        self.reaper = Reaper(self.run_id)
        self.early = EarlyStop(config.stop_at_return, config.time_limit_s, t0=time.monotonic())  # t0: run()'s
        self.evaluations_seen = 0
        payload = context.payload or {}
        # every sampler row, remote ones included (a resume may change the number of either: missing rows start at 0)
        self.restored = [(int(s.get("env_steps", 0)), int(s.get("episodes", 0)))
                         for s in (payload.get("roles", {}).get(f"sampler-{i}", {}) for i in range(config.sampler_rows))]
        self._remote_info: dict[str, Any] | None = None  # the last remote_samplers.json read whole
        self.ray_address: str | None = None  # --ray resolved (auto: $RAY_ADDRESS or the local default) by the preflight
        self.startup: dict[str, float] = {}  # this process's start-up timestamps (monotonic s), see write_startup

    def say(self, line: str) -> None:
        self._print(line)
        flush_stdout()

    # --- the run -----------------------------------------------------------------------------------------
    def run(self) -> TrainResult:
        self.t0 = self.early.t0 = t0 = time.monotonic()
        self.startup.update(t_exec=process_start_time(), t_run=t0)
        with stop_before_training_says_so(self.run_dir):  # before this run's handlers, segments and processes
            for line in sweep_shm().report_lines():  # leftovers removed; others' entries left alone, and why
                self.say(f"[spreeze] {line}")
        self.signals.install()
        try:
            # before any segment: a missing Ray or a dead address costs nothing to undo
            self.ray_address = preflight_ray(self.config)
            self._create_segments()
            self.startup["t_segments"] = time.monotonic()
            self.reaper.start()  # before any role: kills their envs' processes if this process is SIGKILLed
            self._spawn_all()
            self.state = "running"
            self._watch()
            self.startup["t_sampled"] = time.monotonic()  # the end's phases too (docs/startup.md): sampling over
            return shutdown(self, t0)
        except SpreezeError as exc:  # status.json says why (a full /dev/shm, a learner's NaN stop, ...)
            self.failure = self.failure or str(exc)
            self.state = "failed"
            raise
        except KeyboardInterrupt:  # a second Ctrl-C or SIGTERM forced the exit (or the orderly Ctrl-C's own)
            if self.state not in ("finished", "interrupted", "failed"):
                self.state = "interrupted"
            if self.signals.forced is not None:  # where to go on from, as the orderly stop and the serial trainer say
                self.say(f"[spreeze] forced stop; {self._resume_hint()}")
            if self.signals.forced == signal.SIGTERM:  # SIGTERM's exit status, as for the orderly stop
                raise SystemExit(128 + signal.SIGTERM) from None
            raise
        finally:
            self.signals.hold()  # nothing below may be cut short by another signal (finding 18)
            try:
                force_stop(self)
                self._write_status(force=True)
            finally:
                if self.owned is not None:
                    self.owned.unlink_all()
                self.reaper.stop()
                self.signals.restore()

    def _create_segments(self) -> None:
        cfg = self.config
        info = env_info(cfg.env, cfg.env_kwargs)
        self.spec = AlgoSpec.from_config(cfg, info.obs_dim, info.act_dim)
        # The local samplers' lead (their resume gap and their rings), plus two collect batches in flight per
        # remote sampler (pacing.remote_lead): the run's lead, which the critic's allowance adds.
        self.local_lead = pacing.default_lead(cfg.samplers, cfg.envs_per_sampler, cfg.utd_per_row)
        batch = remote_batch_rows(cfg) if cfg.remote_samplers else 0
        self.lead = self.local_lead + pacing.remote_lead(cfg.remote_samplers, batch)
        remote_envs = cfg.remote_envs_per_sampler or cfg.envs_per_sampler
        actor_n, critic_n = vector_sizes(self.spec)
        self.plan = RunSegments.plan(
            self.run_id, cfg.sampler_rows, cfg.prioritized, cfg.buffer_size, info.obs_dim, info.act_dim,
            pacing.ring_capacity(self.local_lead, cfg.envs_per_sampler), actor_n, critic_n,
            remote_rows=cfg.remote_samplers,
            remote_ring_capacity=pacing.ring_capacity(self.local_lead, remote_envs, batch) if batch else 0)
        try:
            self.owned = self.plan.create(parallel_schema(cfg.sampler_rows, bridge=cfg.remote_samplers > 0),
                                          derive_seed(cfg.seed, "replay/tree"))
        except ShmError as exc:  # a full /dev/shm: replay is nearly all of it, so name the flag that sizes it
            raise ShmError(f"{exc} (replay: --buffer-size {cfg.buffer_size:,} transitions)") from None
        self.owned.write_manifest(self.run_dir / "shm.json")
        self.block = self.owned.stats
        self.control = self.block.role(CONTROL)
        self.me = self.block.role(SUPERVISOR)
        self.me.claim()
        # Each row's quota is in the control row before any sampler or the bridge exists (they read it every loop).
        self.quotas = SamplerQuotas(cfg, self.block, self.control, cfg.total_steps - self.context.start_step,
                                    self.run_dir, self.say)
        self.ckpt = CheckpointCoordinator(self.run_dir, self.control, cfg, self.context.generation, self.restored,
                                          self.context.checkpoint_path)
        if self.context.payload is not None:  # a resume: an earlier --save-replay's transitions (a refused replay
            # folder ends it here, before anything is changed), then the evaluation history from the checkpoint on
            self.preloaded = resume_replay(self.owned.storage(), self.run_dir, cfg.env, self.context.start_step,
                                           self.owned.tree(), self.say)
            trim_eval_history(self.run_dir, self.context.start_step)
        # Samplers may collect the warm-up while the learners are still importing torch: the critic
        # learner's first allowance is set here, before the critic (its row's only other writer) exists.
        start = pacing.session_learn_after(cfg.batch_size, cfg.learning_starts, self.preloaded)
        allowance = pacing.data_allowance(0, start, cfg.utd_per_row, self.lead)
        self.block.role("critic-learner").set("allowance", float(allowance))

    def _spawn_all(self) -> None:
        cfg = self.config
        roles: list[tuple[str, str, bool, dict[str, Any]]] = [
            ("critic-learner", "critic_learner_proc", False, {"lead": self.lead, "preloaded": self.preloaded}),
            ("actor-learner", "actor_learner_proc", False, {}),
        ]
        # local samplers only: the remote rows are the bridge's (their quotas are in the control row)
        roles += [(f"sampler-{i}", "sampler_proc", True, {"restored": self.restored[i], "lead": self.local_lead})
                  for i in range(cfg.samplers)]
        if cfg.remote_samplers > 0:  # the one Ray driver, restartable like a sampler, started with them
            first, count = cfg.samplers, cfg.remote_samplers
            roles.append((RAY_BRIDGE, BRIDGE_MODULE, True, {
                "first": first, "count": count, "lead": self.lead, "address": self.ray_address,
                "restored": {i: self.restored[i] for i in range(first, first + count)}}))
        roles += [("evaluator", "evaluator_proc", True, {"t0": self.t0}),
                  ("monitor", "monitor_proc", True, {"t0": self.t0, "preloaded": self.preloaded})]
        for role, module, restartable, extra in roles:
            index = int(role.split("-")[1]) if role.startswith("sampler-") else 0
            self.children[role] = RoleProcess(self.ctx, role, module, self._args_maker(role, index, extra), restartable,
                                              max_restarts=cfg.max_restarts, run_id=self.run_id)
        # The evaluator and the monitor start once both learners have done their first update: on a small
        # machine their start-up (~0.4 s of CPU each: interpreter, numpy, gymnasium, tensorboard) would
        # otherwise share the cores with the learners' model building and first update (docs/startup.md).
        self.deferred = [self.children["evaluator"], self.children["monitor"]]
        self.spawned_at = time.monotonic()
        self.startup["torch_at_spawn"] = float("torch" in sys.modules)  # 0: torch waits until a checkpoint needs it
        for child in self.children.values():
            if child not in self.deferred:
                child.start()
                self.startup[f"t_spawned/{child.role}"] = time.monotonic()

    def _start_deferred(self, now: float) -> None:
        learners_up = all(self.block.role(r).get("t_first") for r in LEARNERS)
        due = learners_up or now - self.spawned_at > DEFER_MAX_S or self.state == "finishing"
        if self.deferred and due and self.state in ("running", "finishing"):
            for child in self.deferred:
                child.start()
                self.startup[f"t_spawned/{child.role}"] = time.monotonic()
            self.deferred = []

    def _args_maker(self, role: str, index: int, extra: dict[str, Any]) -> Callable[[int], ChildArgs]:
        ckpt = str(self.context.checkpoint_path) if self.context.payload is not None else None

        def make(restarts: int) -> ChildArgs:
            return ChildArgs(role, index, self.config, self.spec, self.plan, str(self.run_dir), os.getpid(),
                             self.context.start_step, ckpt, self.context.generation, restarts, dict(extra))

        return make

    # --- watching ------------------------------------------------------------------------------------------
    def _watch(self) -> None:
        """Until training is done, a stop signal, or a failure: restarts, heartbeats, checkpoints, status."""
        every = self.config.checkpoint_every
        next_ckpt = (self.context.start_step // every + 1) * every if every > 0 else math.inf
        while self.signals.received is None and self.failure is None:
            self.tick()
            if self.failure is not None:
                return
            snap = self.block.snapshot()
            steps = self.global_step(snap)
            if self.ckpt.pending:
                self.finish_checkpoint(snap, timeout_s=120.0)
            elif steps >= next_ckpt:
                next_ckpt = (steps // every + 1) * every
                self.ckpt.ask()
            if self.quotas.sampling_done(snap):
                return
            if self._stops_early(snap["evaluator"], steps):
                return

    def tick(self, timeout: float = 0.05) -> None:
        """Wait a little for a child to exit, then handle deaths, restarts, hangs and the status file."""
        # read each sentinel once: a child that dies between two reads would hand wait() a None
        sentinels = [s for s in (c.sentinel for c in self.children.values()) if s is not None]
        if sentinels:
            wait(sentinels, timeout=timeout)
        else:
            time.sleep(timeout)
        if self.failure is None and self.context.lock is not None and self.context.lock.folder_gone():
            self.user_error = self.failure = self.context.gone_message()  # before a (re)start writes there again
            return
        now = time.monotonic()
        self._start_deferred(now)
        for child in self.children.values():
            if child.new_death():
                self._on_death(child, now)
                if child.leftovers:
                    self.say(f"[spreeze] killed {len(child.leftovers)} process(es) that {child.role}'s env had started "
                             f"and left running (pids {', '.join(map(str, child.leftovers))})")
            elif child.restart_due(now) and self.state in ("running", "finishing"):
                # its row is nobody's now: the new process starts from STARTING (see procs/hangs.py)
                set_state(self.block.role(child.role), STARTING)
                child.restart()
                self.me.add("restarts")
                self.say(f"[spreeze] {child.role} restarted (pid {child.pid}, restart {child.restarts})")
        self._check_hangs()
        if self.config.remote_samplers > 0 and self.failure is None and self.state == "running":
            stranded = self.quotas.reassign_abandoned(self._resume_hint)
            if stranded is not None:
                self.user_error = self.failure = stranded
        self._write_status()

    def _on_death(self, child: RoleProcess, now: float) -> None:
        how = describe_exit(child.last_exit) + child.report_traceback()
        if child.last_exit == EXIT_USER_ERROR:  # a one-line user error (bad checkpoint, env raising on reset)
            self.user_error = self.failure = take_error_line(self.run_dir, child.role)
        elif child.last_exit == EXIT_ROLE_ERROR:  # a training failure the child explained (NaN/inf in a learner)
            self.failure = f"{take_error_line(self.run_dir, child.role)}. The run stopped; {self._resume_hint()}"
        elif self.state == "exiting":
            return  # told to exit
        elif not child.restartable:
            self.failure = f"{child.role} (pid {child.pid}) died ({how}); the run stopped; {self._resume_hint()}"
        elif child.over_budget(now):
            self.failure = (f"{child.role} (pid {child.pid}) died ({how}), {child.recent_deaths(now)} deaths within "
                            f"{RESTART_WINDOW_S / 60:.0f} minutes, more than --max-restarts {child.max_restarts}; the "
                            f"run stopped (its error is above); {self._resume_hint()}")
        elif self.state in ("running", "finishing"):
            delay = child.schedule_restart(now)
            self.say(f"[spreeze] {child.role} (pid {child.pid}) died ({how}); restarting it in {delay:.0f} s")

    def _check_hangs(self) -> None:
        """Kill what :class:`~spreeze_like.procs.hangs.HangWatch` finds hung (a stopped or frozen run is not).
        The clock is read after the snapshot: a stop landing before it is then a gap, not heartbeat ages."""
        snap = self.block.snapshot()
        for hang in self.hangs.check(time.monotonic(), self.children, snap):
            self.say(f"[spreeze] {hang.describe()}; killing it")
            hang.child.kill_now()
            if not hang.child.restartable:
                hang.child.new_death()
                self.failure = (f"{hang.role} (pid {hang.child.pid}) hung for {hang.age:.0f} s and was killed; "
                                f"{self._resume_hint()}")

    def global_step(self, snap: dict[str, dict[str, float]]) -> int:
        steps = self.context.start_step + int(sum(snap[f"sampler-{i}"]["env_steps"]
                                                  for i in range(self.config.sampler_rows)))
        self.me.set("env_steps", float(steps))
        return steps

    def _stops_early(self, evaluator: dict[str, float], steps: int) -> bool:
        """True once the time limit came or a new evaluation reached ``stop_at_return`` (early_stop.py)."""
        line = self.early.timed_out(time.monotonic(), steps)
        if line is None and int(evaluator["evaluations"]) > self.evaluations_seen:
            self.evaluations_seen = int(evaluator["evaluations"])
            line = self.early.evaluated(evaluator["eval_return"], int(evaluator["eval_env_step"]))
        if line is not None:
            self.say(line)
        return line is not None

    # --- checkpoints ----------------------------------------------------------------------------------------
    def finish_checkpoint(self, snap: dict[str, dict[str, float]], timeout_s: float) -> bool:
        """Assemble the pending checkpoint if the learners wrote their parts; True once settled."""
        began = time.monotonic()
        with self.signals.deferred():  # a forcing signal lets the checkpoint being written finish first
            outcome = self.ckpt.try_finish(snap, self.global_step(snap), eval_history(self.run_dir), timeout_s)
        self.hangs.busy(time.monotonic() - began)  # the loop was working, not stopped (procs/hangs.py)
        if outcome == "skipped":
            self.say(f"[spreeze] checkpoint {self.ckpt.request} not acknowledged by the learners in "
                     f"{timeout_s:.0f} s; skipped")
        return outcome != "waiting"

    # --- signals and status --------------------------------------------------------------------------------------
    def _write_status(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._status_t < 1.0:
            return
        self._status_t = now
        snap = self.block.snapshot() if self.owned is not None and self.owned.stats is not None else {}
        steps = int(snap.get(SUPERVISOR, {}).get("env_steps", 0))
        extra: dict[str, Any] = {}
        if self.config.remote_samplers > 0:  # what the bridge last wrote; a missing or torn file keeps the last good
            self._remote_info = read_remote_info(self.run_dir) or self._remote_info
            extra["remote_samplers"] = self._remote_info
        write_status(self.run_dir, self.run_id, self.state, steps, self.config.total_steps, self.last_checkpoint(),
                     self.failure, self.children, snap, final=force, guard=self.status_guard, extra=extra)

    def _resume_hint(self) -> str:
        return resume_hint(self.last_checkpoint(), self.run_dir)

    def last_checkpoint(self) -> Path | None:
        return self.ckpt.last if hasattr(self, "ckpt") else self.context.checkpoint_path

