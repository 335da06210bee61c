"""``--serial`` mode: every role in this one process, wired with in-process ports.

The same role classes the parallel mode runs in separate processes (samplers, critic learner,
actor learner, evaluator, monitor) are stepped in turn by one loop:

    each sampler steps its envs once  ->  rows go straight into replay (ReplayWriter)
    once replay holds max(batch_size, learning_starts): critic updates at the UTD ratio,
        each followed by the actor updates it makes due (policy_delay)
    every eval_every env steps: a deterministic evaluation; every checkpoint_every: a checkpoint
    at the end (or a stop): the final checkpoint, and with --save-replay the replay beside it
    the monitor writes TensorBoard every tb_interval seconds

With a fixed seed the run is reproducible exactly (one thread, seeded streams per role, a
deterministic order of calls), which is what the determinism test checks. It is also the baseline
the parallel mode must beat. Nothing here is shared memory: a crash leaves only the run folder
(with its last checkpoint) behind. A learner that stops on NaN/inf
(:class:`~spreeze_like.errors.NonFiniteError`) ends the run with a message naming the last good
checkpoint; no checkpoint is written from a non-finite state.

Ctrl-C and SIGTERM (when ``train()`` runs in the main thread) are turned into a stop request that the
loop reads between env steps, as the parallel supervisor does: the run stops after the current step
and its updates, writes a checkpoint, and raises ``KeyboardInterrupt`` (SIGTERM: ``SystemExit(143)``).
A second signal raises at once, without a checkpoint (a second SIGTERM: ``SystemExit(143)``), and
further signals are ignored while the roles close; one arriving while a checkpoint or the replay
(``--save-replay``) is being written takes effect when that write is whole. Why not let
``KeyboardInterrupt`` land anywhere: it can land inside ``torch.autocast.__enter__`` after the
nesting count went up, which leaves the bf16 weight-cast cache of this thread on for good; a later
``train()`` in the same process then computes with its networks' first weights forever and learns
nothing (seen in the benchmark, which runs and interrupts several runs in one process).
"""

from __future__ import annotations

import math
import signal
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from spreeze_like.checkpoint import (
    LOAD_MISMATCH,
    capture_process_rng,
    interrupted_line,
    mismatch_error,
    restore_process_rng,
    run_dir_hint,
    save_checkpoint,
    stop_before_training_says_so,
)
from spreeze_like.config import TrainConfig
from spreeze_like.cpu_math import flushed_subnormals
from spreeze_like.early_stop import EarlyStop
from spreeze_like.errors import CheckpointError, NonFiniteError, RoleFailedError, SpreezeError, describe_exception
from spreeze_like.metrics import stats_schema
from spreeze_like.procs.children import StopSignals
from spreeze_like.replay.persist import keep_replay, resume_replay
from spreeze_like.results import TrainResult
from spreeze_like.roles import build
from spreeze_like.roles.monitor import Monitor
from spreeze_like.roles.ports import LocalBoard, LocalStatsBlock
from spreeze_like.roles.replay_writer import ReplayWriter
from spreeze_like.rundir import RunContext
from spreeze_like.seeding import seed_process
from spreeze_like.transition import TransitionLayout


class SerialTrainer:
    """Builds every role with in-process ports and runs the loop described in the module docstring."""

    def __init__(self, config: TrainConfig, context: RunContext, print_fn: Callable[[str], None] = print) -> None:
        self.config, self.context, self.print_fn = config, context, print_fn
        torch.set_num_threads(config.torch_threads)  # subnormals are flushed while run() trains (cpu_math.py)
        seed_process(config.seed, "serial")
        self.spec = spec = build.algo_spec(config)
        self.layout = TransitionLayout(spec.obs_dim, spec.act_dim)
        self.stats = LocalStatsBlock(stats_schema(config.samplers))
        self.storage, critic_replay, actor_replay = build.local_replay(config, spec.obs_dim, spec.act_dim)
        self.tree = critic_replay.tree if config.prioritized else None  # --save-replay keeps its priorities
        self.writer = ReplayWriter(critic_replay, self.layout, self.stats.role("replay"))
        self.actor_board, self.critic_board = LocalBoard(), LocalBoard()
        self.samplers = [
            build.sampler(
                config,
                spec,
                i,
                self.writer,
                self.actor_board,
                self.stats.role(f"sampler-{i}"),
                generation=context.generation,
            )
            for i in range(config.samplers)
        ]
        self.critic = build.critic_learner(
            config, spec, critic_replay, self.actor_board, self.critic_board, self.stats.role("critic-learner")
        )
        self.actor = build.actor_learner(
            config, spec, actor_replay, self.critic_board, self.actor_board, self.stats.role("actor-learner")
        )
        self.evaluator = build.evaluator(config, spec, self.actor_board, self.stats.role("evaluator"), context.run_dir,
                                         context.start_step, print_fn)
        self.update_credit = 0.0
        self.evals: list[tuple[int, float, float]] = []
        self.t0 = time.monotonic()
        self.preloaded = 0  # replay rows a resume loaded (--save-replay)
        if context.payload is not None:
            self._restore(context.payload)
            self.preloaded = resume_replay(self.storage, context.run_dir, config.env, context.start_step, self.tree,
                                           print_fn)
        self.start_step = context.start_step
        self.monitor = Monitor(
            context.run_dir,
            self.stats.snapshot,
            config.to_dict(),
            config.total_steps,
            start_step=self.start_step,
            tb_interval=config.tb_interval,
            log_interval=config.log_interval,
            purge_step=self.start_step + 1 if context.payload is not None else None,
            print_fn=print_fn,
            preloaded=self.preloaded,
        )

    # --- the loop -------------------------------------------------------------------------------------------
    def env_steps(self) -> int:
        return sum(s.env_steps for s in self.samplers)

    def run(self) -> TrainResult:
        with flushed_subnormals():  # the caller's thread gets its own state back (cpu_math.py)
            return self._train()

    def _train(self) -> TrainResult:
        cfg = self.config
        self.t0 = t0 = time.monotonic()
        self.monitor.session_start = t0  # curves.csv's wall_s: the clock of TrainResult.wall_s and evals
        early = EarlyStop(cfg.stop_at_return, cfg.time_limit_s, t0)
        learn_after = max(cfg.batch_size, cfg.learning_starts)
        steps = self.env_steps()
        next_eval = _next_multiple(steps, cfg.eval_every)
        next_ckpt = _next_multiple(steps, cfg.checkpoint_every)
        signals = StopSignals()
        signals.install()
        try:
            while steps < cfg.total_steps and signals.received is None:
                for sampler in self.samplers:
                    collected = sampler.step()
                    inserted = self.storage.inserted  # rows ever stored: a full FIFO's size no longer grows
                    if inserted >= learn_after:  # the rows from the one that reached learn_after on earn updates
                        # (pacing.critic_budget): an episode's HER rows arrive at once, possibly across it
                        earning = min(collected, inserted - learn_after + 1)
                        self.update_credit += earning * cfg.utd_per_row  # per row (HER stores 1 + K per step)
                        self._learn()
                steps = self.env_steps()
                if steps >= next_eval:
                    next_eval = _next_multiple(steps, cfg.eval_every)
                    line = early.evaluated(self._evaluate(steps, final=steps >= cfg.total_steps).mean_return, steps)
                    if line is not None:
                        self.print_fn(line)
                        break
                if steps >= next_ckpt:
                    next_ckpt = _next_multiple(steps, cfg.checkpoint_every)
                    with signals.deferred():
                        self.save_checkpoint()
                self.monitor.poll()
                self.context.check_folder()  # deleted or moved: stop here, before a write re-creates anything
                line = early.timed_out(time.monotonic(), steps)
                if line is not None:
                    self.print_fn(line)
                    break
            if signals.received is None:
                history = self.evaluator.history
                final = history[-1] if history and history[-1].env_step == steps else self._evaluate(steps, final=True)
            # A forcing signal lets the write in hand finish (as the supervisor's): one landing inside torch.save
            # broke its zip writer, a traceback and no checkpoint at all (seen with a slowed write; the test)
            with signals.deferred():
                last_checkpoint = self.save_checkpoint()
            if cfg.save_replay:
                with signals.deferred():
                    keep_replay(self.storage, self.context.run_dir, self.env_steps(), cfg.env, self.tree,
                                self.print_fn)
        except KeyboardInterrupt:  # a second signal (or the caller's own, off the main thread): no checkpoint
            # the handler already ignores further signals (StopSignals.hold): this close is not cut short
            self.print_fn(f"[spreeze] forced stop at {self.env_steps():,} env steps; {self._resume_hint()}")
            self.close(check=False)
            if signals.forced == signal.SIGTERM:  # forced by SIGTERM: its exit status, as for the orderly stop
                raise SystemExit(128 + signal.SIGTERM) from None
            raise
        except NonFiniteError as exc:
            self.close(check=False)
            raise NonFiniteError(f"{exc}. The run stopped; {self._resume_hint()}") from None
        except SpreezeError:  # one line already (the run folder gone, an env's wrong observation, a full disk ...)
            self.close(check=False)
            raise
        except Exception as exc:  # an env raising in step or reset (user code), or a bug: see below
            # What a parallel run prints when a role dies (its traceback, then one error line naming what there is
            # to resume), without the restarts: a serial run is one process, and an env whose step raised is not
            # to be trusted again (docs/reliability.md). No checkpoint is written here, as there.
            traceback.print_exc()
            self.close(check=False)
            raise RoleFailedError(f"the run stopped at {self.env_steps():,} env steps on {describe_exception(exc)} "
                                  f"(the traceback is above); {self._resume_hint()}") from exc
        finally:
            signals.restore()
        self.close()
        if signals.received is not None:  # stopped at a step boundary, checkpoint written: say so, raise as asked
            self.print_fn(interrupted_line(self.env_steps(), last_checkpoint, self.context.run_dir))
            if signals.received == signal.SIGTERM:
                raise SystemExit(128 + signal.SIGTERM)
            raise KeyboardInterrupt
        return TrainResult(
            run_dir=self.context.run_dir,
            env_steps=steps,
            critic_updates=self.critic.updates,
            actor_updates=self.actor.updates,
            episodes=sum(s.episodes for s in self.samplers),
            final_eval_return=final.mean_return,
            final_eval_returns=final.returns,
            final_eval_successes=final.successes,
            evals=list(self.evals),
            wall_s=time.monotonic() - t0,
            mode="serial",
            stop_reason=early.reason,
        )

    def _resume_hint(self) -> str:
        return run_dir_hint(self.context.run_dir)

    def _learn(self) -> None:
        while self.update_credit >= 1.0:
            self.critic.update()
            for _ in range(self.actor.updates_due(self.critic.updates)):
                self.actor.update()
            self.update_credit -= 1.0

    def _evaluate(self, steps: int, final: bool = False) -> Any:
        result = self.evaluator.evaluate(steps, final)
        self.evals.append((steps, result.mean_return, time.monotonic() - self.t0))
        self.critic.flush()
        self.actor.flush()
        self.monitor.poll(force=True)
        return result

    # --- checkpoints ---------------------------------------------------------------------------------------------
    def save_checkpoint(self) -> Path:
        """Write a checkpoint; NonFiniteError (nothing written) if a learner's state is not finite."""
        self.critic.check_finite()
        self.actor.check_finite()
        steps = self.env_steps()
        roles: dict[str, Any] = {f"sampler-{s.index}": s.state_dict() for s in self.samplers}
        roles["critic-learner"] = self.critic.state_dict()
        roles["actor-learner"] = self.actor.state_dict()
        payload = {
            "config": self.config.to_dict(),
            "env_steps": steps,
            "generation": self.context.generation,
            "critic_updates": self.critic.updates,
            "actor_updates": self.actor.updates,
            "episodes": sum(s.episodes for s in self.samplers),
            "update_credit": self.update_credit,
            "evals": [list(e) for e in self.evals],
            "roles": roles,
            "process_rng": capture_process_rng(),
            "saved_at": time.time(),
        }
        return save_checkpoint(self.context.run_dir, payload, steps, keep=self.config.keep_checkpoints)

    def _restore(self, payload: dict[str, Any]) -> None:
        roles = payload["roles"]
        missing = [f"sampler-{s.index}" for s in self.samplers if f"sampler-{s.index}" not in roles]
        if missing:
            raise CheckpointError(
                f"{self.context.checkpoint_path} has no state for {', '.join(missing)}; resume with the same "
                "--samplers as the run that wrote it"
            )
        try:
            for s in self.samplers:
                s.load_state_dict(roles[f"sampler-{s.index}"])
            self.critic.load_state_dict(roles["critic-learner"])
            self.actor.load_state_dict(roles["actor-learner"])
        except LOAD_MISMATCH as exc:  # shape mismatch: other hidden sizes, say
            raise mismatch_error(self.context.checkpoint_path, exc) from None
        self.update_credit = float(payload.get("update_credit", 0.0))
        self.evals = [(int(e[0]), float(e[1]), float(e[2])) for e in payload.get("evals", [])]
        restore_process_rng(payload["process_rng"])

    def close(self, check: bool = True) -> None:
        """Flush (``check``: raising NonFiniteError after too many skipped steps) and close every role."""
        try:
            if check:
                self.critic.flush()
                self.actor.flush()
            else:
                self.critic.metrics.flush()
                self.actor.metrics.flush()
        finally:
            self._close_roles()

    def _close_roles(self) -> None:
        self.monitor.close()
        for s in self.samplers:
            s.close()
        self.evaluator.close()


def _next_multiple(step: int, every: int) -> float:
    return (step // every + 1) * every if every > 0 else math.inf


def run_serial(config: TrainConfig, context: RunContext, print_fn: Callable[[str], None] = print) -> TrainResult:
    """Train with every role in this process; see the module docstring."""
    with stop_before_training_says_so(context.run_dir):  # before its handlers: envs, networks, a resume's replay
        trainer = SerialTrainer(config, context, print_fn)
    return trainer.run()
