"""Soak test: a long parallel run with a random sampler SIGKILLed every minute and a SIGTERM + ``--resume``
halfway, against an undisturbed run of the same seed and length.

    python tools/soak.py                                  # 30 minutes, Pendulum-v1, both runs at once
    python tools/soak.py --minutes 3 --kill-every 20 --eval-every 2000 --json soak.json

Both runs are ``python -m spreeze_like.run`` subprocesses with the same flags and seed; each is ended by
SIGTERM after ``--minutes`` of wall time (the disturbed one's time includes its resume), so "the same
length" is the same wall time, and the evaluation curves are also compared at the same env steps.
``--concurrent`` (the default) runs them at the same time, so both meet the same machine load: on a
shared machine, runs one after the other would compare the load of two different half-hours, not
the faults. ``--no-concurrent`` runs the undisturbed one first, each then has the machine alone.

What it reports: the last evaluations of both runs and the mean of the last three (the "final eval
return"), the evaluations at the env steps both reached, env steps, kills and counted restarts, and
these checks (exit status 1 if one fails):

- **exit statuses**: the halfway SIGTERM and the final SIGTERMs end with 143.
- **restarts**: every kill is counted once in ``stats/restarts`` (status.json's per-role restarts).
- **no acknowledged transition lost**: a transition is *acknowledged* once the critic learner's feeder
  has inserted it into replay storage and added it to the ``replay`` row's ``inserted`` counter. A
  record a sampler wrote to its ring but that was not yet drained is not acknowledged; the ring
  belongs to the supervisor, so it survives the sampler's death and is drained later anyway. Per
  session, from status.json's final counters: ``emitted`` = sum over samplers of ``env_steps -
  nonfinite_dropped``; then ``0 <= emitted - inserted <= samplers x ring capacity`` (the difference
  is what was still in the rings when SIGTERM stopped the drain; a kill between a ring write and the
  sampler's counter update can make it negative by ``envs_per_sampler`` per kill, which is allowed),
  and replay holds ``size == min(inserted, buffer_size)``: every acknowledged transition is still in
  replay (FIFO eviction aside) after all the kills and restarts. Replay is not in the checkpoint
  (docs/parallel.md), so across the SIGTERM + resume "not lost" means: the resumed session starts at
  exactly the env step and update counts of the checkpoint written at the SIGTERM (counters
  continuous), and refills replay from there. With ``--save-replay`` (both runs) it means more: the
  resume loads exactly the rows session 1 held in replay (its one "transitions loaded" line), and
  session 2's replay holds ``min(loaded + inserted, buffer_size)``.
- **nothing left**: no process named in any session's status.json alive, no /dev/shm entry of any
  session's run id.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from spreeze_like.checkpoint import load_latest
from spreeze_like.envs import tool_env
from spreeze_like.ipc.naming import list_our_files, pid_alive
from spreeze_like.procs import pacing
from spreeze_like.procs.evaluator_proc import read_results
from spreeze_like.run_launch import start_run, stop_run
from spreeze_like.write_guard import tool_output

SIGTERM_EXIT = 128 + signal.SIGTERM


LOADED = re.compile(r"\[spreeze\] replay: ([\d,]+) transitions loaded")  # the resume's line (--save-replay)


def cli(args: list[str], log: Path) -> subprocess.Popen:
    """A session of one run, in a process session of its own: a SIGTERM to the soak's group reaches the run once,
    from :meth:`SoakRun.stop`, and a SIGKILLed soak's runs stop too (:mod:`spreeze_like.run_launch`)."""
    with open(log, "a") as out:
        return start_run(args, out, PYTHONWARNINGS="ignore", PYTHONUNBUFFERED="1")


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


class SoakRun:
    """One training run (one or two sessions) and what was measured about it."""

    def __init__(self, name: str, root: Path, flags: list[str], disturbed: bool) -> None:
        self.name, self.flags, self.disturbed = name, flags, disturbed
        self.logdir, self.log = root / name, root / f"{name}.log"
        self.proc: subprocess.Popen | None = None
        self.run_dir: Path | None = None
        self.sessions: list[dict[str, Any]] = []  # final status.json of each session
        self.exits: list[int] = []
        self.kills: list[tuple[float, str, int]] = []
        self.resumed_at: dict[str, int] | None = None
        self.t0 = 0.0

    def start(self) -> None:
        self.t0 = time.monotonic()
        self.proc = cli([*self.flags, "--logdir", str(self.logdir)], self.log)

    def find_run_dir(self) -> Path | None:
        if self.run_dir is None and self.logdir.is_dir():
            found = [p for p in self.logdir.iterdir() if p.is_dir()]
            self.run_dir = found[0] if len(found) == 1 else None
        return self.run_dir

    def status(self) -> dict[str, Any]:
        return (read_json(self.find_run_dir() / "status.json") if self.find_run_dir() else None) or {}

    def _terminate(self, timeout: float) -> None:
        """SIGTERM the session, as a user would; SIGKILL after ``timeout``."""
        assert self.proc is not None
        stop_run(self.proc, signal.SIGTERM, timeout)

    def stop(self, timeout: float = 120.0) -> None:
        """SIGTERM the session and record its exit status and final status.json."""
        self._terminate(timeout)
        self.exits.append(self.proc.returncode)
        self.sessions.append(self.status())

    def end_quietly(self, timeout: float = 60.0) -> None:
        """End a session still running when the soak itself is ending early (its runs train for 10**9 steps and
        would go on for ever); nothing is recorded."""
        if self.proc is not None and self.proc.poll() is None:
            self._terminate(timeout)

    def resume(self) -> None:
        payload, _ = load_latest(self.run_dir)
        self.resumed_at = {k: int(payload[k]) for k in ("env_steps", "critic_updates", "actor_updates")}
        self.proc = cli(["--resume", str(self.run_dir), "--log-interval", "0"], self.log)

    def kill_a_sampler(self, rng: random.Random) -> None:
        roles = self.status().get("roles", {})
        alive = [(r, v["pid"]) for r, v in roles.items() if r.startswith("sampler-") and v.get("process") == "alive"
                 and v.get("state") in ("running", "waiting") and v.get("pid")]
        if alive:
            role, pid = rng.choice(alive)
            os.kill(pid, signal.SIGKILL)
            self.kills.append((time.monotonic() - self.t0, role, pid))

    def evals(self) -> list[dict[str, Any]]:
        return read_results(self.run_dir) if self.run_dir else []


def drive(runs: list[SoakRun], minutes: float, kill_every: float, seed: int) -> None:
    """Run the given runs side by side for ``minutes``: kills and the halfway resume for the disturbed ones."""
    try:
        _drive(runs, minutes, kill_every, random.Random(seed))
    except BaseException:  # an early exit of one run, Ctrl-C, SIGTERM (main): the other runs must not go on alone
        for run in runs:
            run.end_quietly()
        raise
    for run in runs:
        run.stop()


def _drive(runs: list[SoakRun], minutes: float, kill_every: float, rng: random.Random) -> None:
    for run in runs:
        run.start()
    end_s, half_s = minutes * 60.0, minutes * 30.0
    next_kill = {id(r): kill_every for r in runs}
    halved = {id(r): not r.disturbed for r in runs}
    while True:
        now = time.monotonic()
        for run in runs:
            elapsed = now - run.t0
            if run.proc.poll() is not None and elapsed < end_s:
                raise SystemExit(f"{run.name} exited early with {run.proc.returncode}; see {run.log}")
            if run.disturbed and not halved[id(run)] and elapsed >= half_s:
                run.stop()
                run.resume()
                halved[id(run)] = True
            # no kill in the 15 s before a SIGTERM: the counts per session are then unambiguous
            near_stop = min(abs(half_s - elapsed), abs(end_s - elapsed)) < 15.0
            if run.disturbed and elapsed >= next_kill[id(run)]:
                next_kill[id(run)] += kill_every
                if not near_stop:
                    run.kill_a_sampler(rng)
        if all(now - r.t0 >= end_s for r in runs):
            break
        time.sleep(0.5)


def check_session(status: dict[str, Any], flags: dict[str, int], carried: int = 0) -> dict[str, Any]:
    """The acknowledged-transition accounting of one session (see the module docstring); ``carried``: the rows a
    resume loaded from the replay the session before saved (--save-replay), which replay must also still hold."""
    counters = status.get("counters", {})
    samplers = [r for r in counters if r.startswith("sampler-")]
    emitted = int(sum(counters[r]["env_steps"] - counters[r]["nonfinite_dropped"] for r in samplers))
    inserted, size = int(counters["replay"]["inserted"]), int(counters["replay"]["size"])
    ring = pacing.ring_capacity(pacing.default_lead(len(samplers), flags["envs"]), flags["envs"])
    restarts = sum(v["restarts"] for r, v in status["roles"].items() if r.startswith("sampler-"))
    in_rings = emitted - inserted
    return {
        "env_steps": int(status["env_steps"]), "emitted": emitted, "inserted": inserted, "replay_size": size,
        "in_rings_at_stop": in_rings, "sampler_restarts": restarts, "carried": carried,
        "ok_ack": -flags["envs"] * restarts <= in_rings <= len(samplers) * ring
        and size == min(carried + inserted, flags["buffer"]),
    }


def leftovers(run: SoakRun, statuses: list[dict[str, Any]]) -> dict[str, list]:
    pids = {p for s in statuses for p in [s.get("supervisor_pid")] + [r.get("pid") for r in s.get("roles", {}).values()]
            if p}
    pids |= {pid for _, _, pid in run.kills}
    run_ids = {s.get("run_id") for s in statuses if s.get("run_id")}
    shm = [n for rid in sorted(run_ids) for n in list_our_files(run_id=rid)]
    return {"processes": sorted(p for p in pids if pid_alive(p)), "shm": shm}


def summary(run: SoakRun, flags: dict[str, int]) -> dict[str, Any]:
    evals = run.evals()
    last = [round(e["mean_return"], 1) for e in evals[-5:]]
    final = sum(e["mean_return"] for e in evals[-3:]) / len(evals[-3:]) if evals else float("nan")
    sessions: list[dict[str, Any]] = []
    for status in run.sessions:  # with --save-replay a resumed session starts with the replay the one before saved
        carried = sessions[-1]["replay_size"] if sessions and flags["save_replay"] else 0
        sessions.append(check_session(status, flags, carried))
    return {
        "run_dir": str(run.run_dir), "exits": run.exits, "env_steps": sessions[-1]["env_steps"] if sessions else 0,
        "final_eval_return": round(final, 1), "last_evals": last,
        "evals": [(int(e["env_step"]), round(e["mean_return"], 1)) for e in evals],
        "kills": len(run.kills), "sampler_restarts": sum(s["sampler_restarts"] for s in sessions),
        "sessions": sessions, "resumed_at": run.resumed_at, "leftovers": leftovers(run, run.sessions),
        "replay_loaded": [int(n.replace(",", "")) for n in LOADED.findall(run.log.read_text())] if run.log.exists()
        else [],
    }


def compare(undisturbed: dict[str, Any], disturbed: dict[str, Any], eval_every: int) -> list[tuple[int, float, float]]:
    """Evaluations of both runs at the same eval index (each near a multiple of ``eval_every``)."""
    a = {round(s / eval_every): r for s, r in undisturbed["evals"]}
    b = {round(s / eval_every): r for s, r in disturbed["evals"]}
    return [(k * eval_every, a[k], b[k]) for k in sorted(set(a) & set(b))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="wall time of each run (default 30)")
    parser.add_argument("--env", default="Pendulum-v1", help="env id (default Pendulum-v1)")
    parser.add_argument("--seed", type=int, default=1, help="run seed of both runs, and of the kill choices")
    parser.add_argument("--kill-every", type=float, default=60.0, help="seconds between sampler kills (default 60)")
    parser.add_argument("--samplers", type=int, default=2, help="sampler processes per run (default 2)")
    parser.add_argument("--eval-every", type=int, default=5000, help="env steps between evaluations (default 5000)")
    parser.add_argument("--concurrent", action=argparse.BooleanOptionalAction, default=True,
                        help="run both at the same time (default), so both meet the same machine load")
    parser.add_argument("--save-replay", action="store_true",
                        help="both runs with --save-replay: the disturbed run's resume must load every transition "
                             "its first session had in replay")
    parser.add_argument("--logdir", default="", help="where the runs go (default: a new folder under /tmp)")
    parser.add_argument("--json", default="", help="also write the report as JSON to this file")
    args = parser.parse_args(argv)
    tool_output(parser, args.json)  # tried now, not after the measuring
    if min(args.minutes, args.kill_every) <= 0 or min(args.samplers, args.eval_every) < 1:
        parser.exit(2, "error: --minutes and --kill-every need a time > 0, --samplers and --eval-every a whole number "
                       ">= 1\n")
    tool_env(parser, args.env)
    # SIGTERM (a job's limit, kill) as an exception, so that drive() ends the runs it started before the soak exits
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    root = Path(args.logdir or tempfile.mkdtemp(prefix="spz_soak_"))
    root.mkdir(parents=True, exist_ok=True)
    buffer = 1_000_000
    flags = ["--env", args.env, "--seed", str(args.seed), "--samplers", str(args.samplers), "--total-steps",
             str(10**9), "--eval-every", str(args.eval_every), "--eval-episodes", "10", "--checkpoint-every",
             "20000", "--buffer-size", str(buffer), "--log-interval", "0", *(["--save-replay"] if args.save_replay else [])]
    runs = [SoakRun("undisturbed", root, flags, False), SoakRun("disturbed", root, flags, True)]
    print(f"[soak] {args.minutes:g} min each, {'concurrently' if args.concurrent else 'one after the other'}, "
          f"kill a sampler every {args.kill_every:g} s, SIGTERM + resume at {args.minutes / 2:g} min; logs in {root}")
    sys.stdout.flush()
    if args.concurrent:
        drive(runs, args.minutes, args.kill_every, args.seed)
    else:
        for run in runs:
            drive([run], args.minutes, args.kill_every, args.seed)
    info = {"envs": 1, "buffer": buffer, "save_replay": args.save_replay}
    report = {"settings": vars(args), "undisturbed": summary(runs[0], info), "disturbed": summary(runs[1], info)}
    u, d = report["undisturbed"], report["disturbed"]
    report["same_steps"] = compare(u, d, args.eval_every)
    resumed = runs[1].resumed_at or {}
    first = runs[1].sessions[0] if runs[1].sessions else {}
    checks = {
        "exit_statuses_143": all(code == SIGTERM_EXIT for code in u["exits"] + d["exits"]),
        "every_kill_restarted_and_counted": d["sampler_restarts"] == d["kills"] and u["sampler_restarts"] == 0,
        "no_acknowledged_transition_lost": all(s["ok_ack"] for s in u["sessions"] + d["sessions"]),
        "resume_continuous": bool(resumed) and resumed.get("env_steps") == first.get("env_steps"),
        "nothing_left": not any(r["leftovers"]["processes"] or r["leftovers"]["shm"] for r in (u, d)),
    }
    if args.save_replay:  # the resume loaded exactly what session 1 held in replay, and said so once
        checks["replay_carried_over"] = (len(d["sessions"]) == 2 and not u["replay_loaded"]
                                         and d["replay_loaded"] == [d["sessions"][0]["replay_size"]])
    report["checks"] = checks
    for name, r in (("undisturbed", u), ("disturbed", d)):
        print(f"[soak] {name}: final eval return {r['final_eval_return']} (mean of the last 3; last evals "
              f"{r['last_evals']}), {r['env_steps']:,} env steps, {r['kills']} kills, {r['sampler_restarts']} "
              f"restarts counted, exits {r['exits']}")
        for i, s in enumerate(r["sessions"]):
            print(f"[soak]   session {i + 1}: emitted {s['emitted']:,}, acknowledged (inserted) {s['inserted']:,}, "
                  f"loaded from the saved replay {s['carried']:,}, "
                  f"replay size {s['replay_size']:,}, in rings at stop {s['in_rings_at_stop']}, "
                  f"sampler restarts {s['sampler_restarts']}")
    print(f"[soak] resumed at {resumed} (checkpoint of the halfway SIGTERM; session 1 ended at "
          f"{first.get('env_steps')} env steps)")
    print("[soak] at the same env steps (undisturbed, disturbed): "
          + ", ".join(f"{s}: {a} / {b}" for s, a, b in report["same_steps"][-5:]))
    for name, ok in checks.items():
        print(f"[soak] check {name}: {'ok' if ok else 'FAILED'}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
