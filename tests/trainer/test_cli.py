"""The CLI: every bad input ends with exit status 2 and one ``error:`` line on stderr, no traceback."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import pytest

from spreeze_like.checkpoint import list_checkpoints
from spreeze_like.config import TrainConfig
from spreeze_like.training import train

from .test_serial import TINY


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "spreeze_like.run", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )


def assert_one_line_error(proc: subprocess.CompletedProcess, *fragments: str) -> None:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    for fragment in fragments:
        assert fragment in lines[0]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A tiny finished Pendulum SAC run with checkpoints, to resume from."""
    logdir = tmp_path_factory.mktemp("runs")
    config = dataclasses.replace(TrainConfig(), logdir=str(logdir), **{**TINY, "total_steps": 300})
    return train(config, print_fn=lambda line: None).run_dir


@pytest.mark.parametrize(
    "args, fragments",
    [
        (["--env", "Pendelum-v1"], ["cannot make env", "Did you mean"]),
        (["--env", "CartPole-v1"], ["continuous-action agents", "Discrete action space"]),
        (["--batch-size", "-3"], ["--batch-size", ">= 1"]),
        (["--batch-size", "abc"], ["--batch-size", "invalid int value"]),
        (["--algo", "ppo"], ["--algo", "invalid choice"]),
        (["--no-such-flag"], ["unrecognized arguments"]),
    ],
)
def test_bad_input_exits_2_with_one_line(args, fragments):
    assert_one_line_error(run_cli(*args, "--log-interval", "0"), *fragments)


def test_deprecated_env_version_is_one_line_with_warnings_shown():
    """As a user's shell runs it (no PYTHONWARNINGS): gymnasium's DeprecationWarning stayed above the error line."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    proc = subprocess.run([sys.executable, "-m", "spreeze_like.run", "--env", "Pendulum-v0"], capture_output=True,
                          text=True, check=False, timeout=120, env=env)
    assert_one_line_error(proc, "cannot make env 'Pendulum-v0'", "Pendulum-v1")


@pytest.mark.parametrize("mode", [[], ["--serial"]])
def test_unwritable_logdir(tmp_path, mode):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    proc = run_cli("--logdir", str(blocker / "runs"), "--total-steps", "10", *mode)
    assert_one_line_error(proc, "cannot create a run folder", "--logdir")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]  # nothing created


def test_checkpoint_from_another_algo_or_env(finished_run):
    assert_one_line_error(
        run_cli("--resume", str(finished_run), "--algo", "td3", "--total-steps", "600"), "with algo 'sac'", "td3"
    )
    assert_one_line_error(
        run_cli("--resume", str(finished_run), "--env", "MountainCarContinuous-v0", "--total-steps", "600"),
        "from env 'Pendulum-v1'",
    )


def test_checkpoint_with_other_hidden_sizes_names_the_setting(finished_run):
    """Before: the networks failed to load in the learners, 'does not fit this config (Error(s) in loading
    state_dict for Critic:)', naming no setting."""
    saved = " ".join(map(str, TINY["hidden_sizes"]))
    assert_one_line_error(
        run_cli("--resume", str(finished_run), "--hidden-sizes", "7", "7", "--total-steps", "600"),
        f"--hidden-sizes {saved}, not 7 7", f"resume without --hidden-sizes (or with --hidden-sizes {saved})",
    )


def test_corrupt_checkpoint(finished_run, tmp_path):
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(finished_run, copy)
    newest = list_checkpoints(copy)[-1]
    newest.write_bytes(newest.read_bytes()[:100])
    assert_one_line_error(run_cli("--resume", str(copy), "--total-steps", "600"), "corrupt or unreadable")


def test_resume_of_a_missing_folder(tmp_path):
    assert_one_line_error(run_cli("--resume", str(tmp_path / "nope")), "--resume", "no such folder")


def test_a_missing_config_file_says_what_to_give(tmp_path):
    assert_one_line_error(run_cli("--config", str(tmp_path / "nope.json")), "No such file",
                          "give --config the path of a JSON file of settings")


def test_an_abbreviated_flag_is_refused_not_guessed():
    """argparse's default took --hidden-size 3 as --hidden-sizes 3 and trained a whole run with it."""
    assert_one_line_error(run_cli("--hidden-size", "3", "--total-steps", "10"), "unrecognized arguments",
                          "did you mean --hidden-sizes?")


def test_package_import_stays_light():
    code = (
        "import sys, spreeze_like; assert 'torch' not in sys.modules; import spreeze_like.training; "
        "assert callable(spreeze_like.train)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=120)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize(
    "args, flag",
    [(["--samplers", "1000000"], "--samplers"), (["--eval-episodes", "1000000"], "--eval-episodes"),
     (["--utd", "1e9"], "--utd"), (["--prioritized", "--priority-alpha", "2"], "--priority-alpha"),
     (["--buffer-size", "1000000000000000000"], "--buffer-size")],
)
def test_finding12_absurd_flags_refused_before_any_run_folder(tmp_path, args, flag):
    proc = run_cli(*args, "--logdir", str(tmp_path / "runs"), "--log-interval", "0")
    assert_one_line_error(proc, flag)
    assert not (tmp_path / "runs").exists()  # refused up front: no run folder, no process started


def test_a_ctrl_c_before_a_resume_goes_on_names_its_last_good_checkpoint(finished_run, monkeypatch):
    """Ctrl-C in a ``--resume``'s env check (gymnasium and MuJoCo import there: seconds) said "interrupted before
    the run went on; its folder is as it was", while the same stop a moment later, in the serial trainer's start,
    said "interrupted before training began; the last good checkpoint is ...": one case, two lines (2026-11-28).
    Both say the second now. In-process: the env check raises the KeyboardInterrupt a Ctrl-C would."""
    def interrupted(*args, **kwargs) -> None:
        raise KeyboardInterrupt

    before = sorted((p.name, p.stat().st_mtime_ns) for p in (finished_run / "checkpoints").iterdir())
    monkeypatch.setattr("spreeze_like.training.checked_env_info", interrupted)
    with pytest.raises(KeyboardInterrupt) as raised:
        train(resume=str(finished_run), total_steps=600, print_fn=lambda line: None)
    newest = list_checkpoints(finished_run)[-1]
    assert str(raised.value) == (f"interrupted before training began; the last good checkpoint is {newest}; "
                                 f"resume with --resume {finished_run}")
    assert sorted((p.name, p.stat().st_mtime_ns) for p in (finished_run / "checkpoints").iterdir()) == before
