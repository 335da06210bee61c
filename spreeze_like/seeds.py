"""``python -m spreeze_like.seeds --seeds 1-5 [run flags]``: one experiment over several seeds, as one command.

A result in RL is a distribution over seeds, so an experiment is several runs that differ only in
``--seed``. This command starts them, ``--jobs`` at a time (``auto``: as many as this machine's cores
hold, from the processes one run keeps busy), waits for them, and ends with the final evaluation of
every seed and their mean, standard deviation, median, interquartile mean (IQM, the statistic
rliable recommends over few seeds) and range. Every other flag is ``python -m spreeze_like.run``'s
and goes to every run unchanged; it is checked once, before anything starts.

The folder ``<logdir>/seeds__<env>__<algo>__<unixtime>/`` holds ``seeds.json`` (the command, each
seed's status, run folder and outcome: rewritten atomically at each change), and per seed
``seed_S/console.log`` and the run folder ``seed_S/<env>__<algo>__S__<time>/``; at the end its
``summary`` holds the statistics above.

``--vary NAME=V1,V2`` (:mod:`spreeze_like.seeds_grid`) compares settings: every value (every cell of
the product of several ``--vary``) runs with every seed, started seed by seed so that a stop leaves
the settings with about as many seeds each; each cell's runs live in ``cell<K>_<label>/seed_S/``,
``seeds.json`` names the cells, and the closing lines give each setting's statistics and rank them.
``--reach RETURN`` adds how soon each run's evaluation first reached RETURN.

``tensorboard --logdir <folder>`` shows every seed, ``python tools/plot_runs.py <folder>/seed_*/*__*
--mean -o seeds.png`` draws their mean and range (``<folder>/cell*/seed_*/*__*``: one per setting).

Stops: Ctrl-C or SIGTERM starts no further seed and is passed on once to every running seed, which
stops in order as a single run does (checkpoint, then exit); a second one forces, as for a run.
``--resume <folder>`` then continues every seed that did not finish: from its run folder's newest
checkpoint (``--resume`` of that run), or afresh where it had none. Run flags typed with it override
the saved ones in every seed, as ``run --resume`` takes them: ``--total-steps`` larger than a finished
seed's steps continues that seed too. If this process is killed, each of its runs sees its parent gone
and sends itself one SIGTERM (:mod:`spreeze_like.seed_runs`), stopping the same way. A seed
that fails is reported with its error line and the others go on (exit status 1); a bad-input error
from the first seed before it made a run folder (an env that does not make, say) stops the command
there with that line (exit status 2), since every seed would meet it. The folder is locked while a
seeds process uses it (:class:`~spreeze_like.rundir.RunFolderLock`).

Decisions: runs are not pinned to cores (two experiments started side by side would pin to the same
ones; unpinned, the kernel places them); ``--autotune`` is accepted with one job only (its plan takes
the whole machine for one run, and concurrent probes would measure each other).
"""

from __future__ import annotations

import json
import math
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from spreeze_like.console import exit_status, say
from spreeze_like.errors import ConfigError
from spreeze_like.rundir import RunFolderLock, new_unique_folder, safe_name, write_json_atomic
from spreeze_like.seed_runs import (
    RECORD_FILE,
    STATUSES,
    SeedRecord,
    SeedRun,
    at_total_steps,
    latest_eval,
    read_outcome,
    read_reach,
    resume_args,
    seed_dir,
)
from spreeze_like.seeds_cli import SeedsCommand, checked_run_config, parse_seeds_command, run_config
from spreeze_like.seeds_grid import Cell, flag_setting, varied_flags
from spreeze_like.seeds_summary import exit_code, run_name, summary_lines, summary_record
from spreeze_like.write_guard import WriteGuard

FORMAT = "spreeze-seeds/1"


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the process exit status."""
    from spreeze_like.ipc.lifetime import die_with_launcher

    die_with_launcher()  # started by a tool of ours (tools/bench_seeds.py): stop in order when it dies
    return exit_status(lambda: run(sys.argv[1:] if argv is None else argv))


def run(argv: list[str]) -> int:
    command = parse_seeds_command(argv)
    if command.resume:
        folder, record = _reopen(command)
    else:
        folder, record = _new_folder(command), _new_record(command)
    lock = RunFolderLock.acquire(folder)
    try:
        return Seeds(folder, record, command).run()
    finally:
        lock.release()


def _new_folder(command: SeedsCommand) -> Path:
    name = f"seeds__{safe_name(command.config.env)}__{safe_name(command.algo)}__{int(time.time())}"
    return new_unique_folder(Path(command.logdir), name, "a seeds folder")


def _new_record(command: SeedsCommand) -> dict[str, Any]:
    record = {"format": FORMAT, "run_args": command.run_args, "env": command.config.env, "algo": command.algo,
              "jobs": command.jobs, "created": time.time(), "reach": command.reach}
    if command.cells:
        # seed-major: whenever the command stops, every setting has about as many seeds done as the others
        record["cells"] = [cell.to_dict() for cell in command.cells]
        record["seeds"] = [SeedRecord(seed, cell=k).to_dict() for seed in command.seeds
                           for k in range(len(command.cells))]
    else:
        record["seeds"] = [SeedRecord(seed).to_dict() for seed in command.seeds]
    return record


def _reopen(command: SeedsCommand) -> tuple[Path, dict[str, Any]]:
    folder = Path(command.resume)
    path = folder / RECORD_FILE
    what = f"--resume {command.resume}"
    try:
        record = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{what}: no {RECORD_FILE} there; give a folder made by python -m spreeze_like.seeds "
                          "(to continue one run, python -m spreeze_like.run --resume RUN_FOLDER)") from None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{what}: cannot read {path} ({exc}); it is not a seeds folder this version can "
                          "continue") from None
    try:
        if record.get("format") != FORMAT:
            raise ValueError(f"format {record.get('format')!r}, not {FORMAT}")
        reach = record.get("reach")
        if reach is not None and (isinstance(reach, bool) or not isinstance(reach, (int, float))
                                  or not math.isfinite(reach)):
            raise ValueError(f"reach {reach!r}")
        cells = [Cell.from_dict(c) for c in record.get("cells") or []]
        for entry in record["seeds"]:
            cell = SeedRecord.from_dict(entry).cell
            if (cell is None) != (not cells) or (cell is not None and not 0 <= cell < len(cells)):
                raise ValueError(f"seed {entry.get('seed')} names setting {cell} of {len(cells)}")
        saved_args = [str(a) for a in record["run_args"]]
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ConfigError(f"{what}: {path} is not a seeds record this version can continue ({exc})") from None
    env = run_config(saved_args).env  # from the saved flags (and a --config file they name), not the header
    for cell in cells:  # a cell's flags are data too: the env they would make must be the folder's
        if run_config([*saved_args, *cell.args]).env != env:
            raise ConfigError(f"{what}: its setting {cell.label!r} would change the env; it is not a grid this "
                              "command made (--vary never varies --env)")
    typed = sorted(varied_flags(cells) & {flag_setting(t) for t in command.run_args if t.startswith("--")})
    if typed:  # it would reach every run of every setting alike: the grid would compare nothing there
        raise ConfigError(f"{what}: its grid varies {', '.join(typed)}; typed now it would give every setting the "
                          "same value (start a new folder to compare other values)")
    if command.typed_env is not None and command.typed_env != env:
        raise ConfigError(f"{what}: its seeds train {env}; --env {command.typed_env} would mix envs in one experiment "
                          "(start a new folder for another env)")
    if ":" in env and command.typed_env != env:
        # a folder is data, not code: a saved module:EnvId is imported only when typed again (as run --resume)
        raise ConfigError(f"{what}: its env {env} imports the module before ':'; type --env {env} again to "
                          "continue it (a folder is data, and is not trusted to import code)")
    # flags typed now override the saved ones, in every seed (as run --resume takes them)
    command.config = checked_run_config(saved_args + command.run_args)[0]
    if command.run_args:
        record["run_args"] = saved_args + command.run_args
        for seed in record["seeds"]:  # a larger --total-steps continues the finished seeds too
            if seed["status"] == "done" and (seed.get("env_steps") or 0) < command.config.total_steps:
                seed["status"] = "waiting"
    command.override_args, command.run_args = command.run_args, list(record["run_args"])
    if command.reach is None:  # --reach typed now replaces the saved one; else the folder's stays
        command.reach = record.get("reach")
    record["reach"] = command.reach
    return folder, record


class Seeds:
    """The scheduler: starts seeds up to ``jobs`` at a time, forwards stops, records, and reports."""

    def __init__(self, folder: Path, record: dict[str, Any], command: SeedsCommand,
                 print_fn: Callable[[str], None] = say) -> None:
        self.folder, self.record, self.command, self.say = folder, record, command, print_fn
        self.seeds = [SeedRecord.from_dict(s) for s in record["seeds"]]
        self.cells = [Cell.from_dict(c) for c in record.get("cells") or []]
        self.jobs = command.jobs or int(record.get("jobs", 1))
        self.running: list[SeedRun] = []
        self.stop_signal: int | None = None
        self.refused: SeedRecord | None = None
        self.guard = WriteGuard(f"{self.folder / RECORD_FILE}", "the runs' own folders keep their results",
                                retry_s=0)

    def run(self) -> int:
        todo = [s for s in self.seeds if not s.finished]
        done = len(self.seeds) - len(todo)
        reason = f" ({self.command.jobs_reason})" if self.command.jobs_reason else ""
        already = f"; {done} already done" if done else ""
        seeds = sorted({s.seed for s in self.seeds})
        what = f"{len(seeds)} seeds ({' '.join(map(str, seeds))})"
        if self.cells:
            what = f"{len(self.cells)} settings x {what} = {len(self.seeds)} runs"
        self.say(f"[seeds] {what} of {self.record['algo']} on {self.record['env']}, {self.jobs} at a time{reason}"
                 f"{already}; folder {self.folder}   (tensorboard --logdir {self.folder})")
        for k, cell in enumerate(self.cells):
            self.say(f"[seeds]   setting {k}: {cell.label}   (its runs: {self.folder / cell.folder(k)})")
        self.save()
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            self._loop(todo)
        except BaseException:  # this process's own failure (a seed folder it cannot write): stop the runs in order
            self._abandon()
            raise
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        reach = self.command.reach
        if reach is not None:
            for seed in self.seeds:
                read_reach(seed, self.folder / seed.run_dir if seed.run_dir else None, reach)
        self.record["summary"] = summary_record(self.seeds, self.cells, reach)  # for scripts: no parsing
        self.save()
        for line in summary_lines(self.seeds, self.folder, self.stop_signal is not None, self.cells, reach):
            self.say(line)
        if self.refused is not None and self.refused.line:  # bad input: the one error line, as a run ends with
            say(self.refused.line if self.refused.line.startswith("error:") else f"error: {self.refused.line}",
                file=sys.stderr)
        return exit_code(self.seeds, self.stop_signal)

    def _on_signal(self, signum: int, frame: object) -> None:
        first = self.stop_signal is None
        self.stop_signal = self.stop_signal or signum
        if first:
            self.say(f"[seeds] {signal.Signals(signum).name}: no further seed starts; the running ones stop in "
                     "order (again to force)")
        for seed_run in self.running:
            seed_run.signal(signum)

    def _loop(self, todo: list[SeedRecord]) -> None:
        waiting = list(todo)
        next_progress = time.monotonic() + self.command.progress_every
        while waiting or self.running:
            while waiting and len(self.running) < self.jobs and self.stop_signal is None and self.refused is None:
                self._start(waiting.pop(0))
            for seed_run in list(self.running):
                known = seed_run.record.run_dir
                if seed_run.poll(stopping=self.stop_signal is not None):
                    self.running.remove(seed_run)
                    self._ended(seed_run.record)
                elif seed_run.record.run_dir != known:  # the run made its folder: seeds.json says where
                    self.save()
            if (self.stop_signal is not None or self.refused is not None) and not self.running:
                break
            if self.command.progress_every > 0 and time.monotonic() >= next_progress and self.running:
                next_progress = time.monotonic() + self.command.progress_every
                self.say(self._progress_line())
            time.sleep(0.2)

    def _abandon(self) -> None:
        """Ask every running seed to stop (SIGTERM: its orderly stop) and wait for it, recording each."""
        self.stop_signal = self.stop_signal or signal.SIGTERM
        for seed_run in self.running:
            seed_run.signal(signal.SIGTERM)
        while self.running:
            for seed_run in list(self.running):
                if seed_run.poll(stopping=True):
                    self.running.remove(seed_run)
            time.sleep(0.2)
        self.save()

    def _start(self, record: SeedRecord) -> None:
        if at_total_steps(record, self.folder, self.command.config.total_steps):
            # its last session ended at the last step but this process did not see it end (it was killed)
            record.status, record.exit_status = "done", 0
            read_outcome(record, self.folder / str(record.run_dir))
            self._ended(record)
            return
        args = resume_args(record, self.folder, self.command.override_args)
        if args is None:
            if record.run_dir:
                self.say(f"[seeds] {self.name(record)}: {self.folder / record.run_dir} has no checkpoint to continue "
                         "from; starting the seed again in a new run folder (the old one is left as it is)")
            record.run_dir = None
            cell_args = self.cells[record.cell].args if record.cell is not None else ()
            args = [*self.command.run_args, *cell_args, "--seed", str(record.seed), "--logdir",
                    str(self.seed_folder(record))]
        seed_run = SeedRun(record, self.folder, args, self.seed_folder(record))
        seed_run.start()
        self.running.append(seed_run)
        verb = f"continues from {self.folder / str(record.run_dir)}" if "--resume" in args else "started"
        self.say(f"[seeds] {self.name(record)} {verb} (pid {record.pid}; its console: "
                 f"{seed_run.dir / 'console.log'})")
        self.save()

    def seed_folder(self, record: SeedRecord) -> Path:
        """Where a run's console and run folders live: ``seed_S``, or ``cell<K>_<label>/seed_S`` in a grid."""
        cell = "" if record.cell is None else self.cells[record.cell].folder(record.cell)
        return seed_dir(self.folder, record.seed, cell)

    def name(self, record: SeedRecord) -> str:
        return run_name(record, self.cells)

    def _ended(self, record: SeedRecord) -> None:
        if record.status == "done":
            outcome = ("no evaluation recorded" if record.final_return is None else
                       f"final evaluation {record.final_return:.1f} after {record.env_steps:,} env steps")
            self.say(f"[seeds] {self.name(record)} done: {outcome}"
                     + (f", {record.wall_s:.0f} s" if record.wall_s is not None else ""))
        elif record.status == "stopped":
            self.say(f"[seeds] {self.name(record)} stopped; it continues with --resume {self.folder}")
        elif record.status == "refused":
            self.refused = record
            self.say(f"[seeds] {self.name(record)} refused its settings: {record.line}; no further seed starts")
        else:
            self.say(f"[seeds] {self.name(record)} failed ({record.line}); see "
                     f"{self.seed_folder(record) / 'console.log'}; the other seeds go on")
        self.save()

    def _progress_line(self) -> str:
        parts = []
        for seed_run in self.running:
            latest = latest_eval(seed_run.find_run_dir())
            parts.append(f"{self.name(seed_run.record)} " + (f"eval {latest[1]:.1f} at {latest[0]:,}" if latest
                                                             else "no evaluation yet"))
        counts = {status: sum(s.status == status for s in self.seeds) for status in STATUSES}
        return (f"[seeds] {' | '.join(parts)}; {counts['done']} done, {counts['waiting']} waiting"
                + (f", {counts['failed']} failed" if counts["failed"] else ""))

    def save(self) -> None:
        """Rewrite ``seeds.json`` (atomically); a failed write is one warning line, and the runs go on."""
        self.record["seeds"] = [s.to_dict() for s in self.seeds]
        try:
            write_json_atomic(self.folder / RECORD_FILE, self.record)
        except OSError as exc:
            self.guard.failed(exc)
        else:
            self.guard.succeeded()


if __name__ == "__main__":
    sys.exit(main())
