"""Review finding 4: ``--resume`` trusts nothing it reads; a run folder's config.json cannot make us import code.
Nor can a checkpoint, through ``python -m spreeze_like.evaluate`` or ``load_policy`` (found 2026-12-03: ``cd RUN &&
python -m spreeze_like.evaluate .`` imported an ``evil.py`` shipped in the folder, its checkpoint naming
``evil:Pendulum-v1``).

The saved env id ``module:EnvId`` would import ``module``; with ``python -m`` the current folder is on
``sys.path``, so a ``module.py`` shipped inside a downloaded run folder (or lying in the folder the user
resumes from) would run. Each test plants a real ``evil.py`` that leaves a marker file when imported.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from spreeze_like.checkpoint import list_checkpoints
from spreeze_like.config import TrainConfig
from spreeze_like.errors import CheckpointError, ConfigError
from spreeze_like.flags import parse_command_line
from spreeze_like.policy import load_policy

from .test_policy import trained

EVIL_ENV = "evil:Evil-v0"


def plant(folder: Path, marker: Path) -> None:
    """An ``evil.py`` in ``folder`` that writes ``marker`` if anything imports it."""
    (folder / "evil.py").write_text(f"from pathlib import Path\nPath({str(marker)!r}).write_text('imported')\n")


def saved_run(folder: Path) -> Path:
    """A run folder whose config.json names ``evil:Evil-v0`` (what a shared run of a custom env carries)."""
    folder.mkdir()
    config = dataclasses.replace(TrainConfig(), env=EVIL_ENV, total_steps=600)
    (folder / "config.json").write_text(json.dumps(config.to_dict()))
    return folder


def resume_cli(resume: str, cwd: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.run([sys.executable, "-m", "spreeze_like.run", "--resume", resume, *extra], cwd=cwd,
                          capture_output=True, text=True, check=False, timeout=120, env=env)


@pytest.mark.parametrize("where", ["inside the run folder", "beside it, in the current folder"])
def test_finding04_resume_does_not_import_the_saved_env_module(tmp_path, where):
    run = saved_run(tmp_path / "run")
    marker = tmp_path / "IMPORTED"
    if where == "inside the run folder":  # cd run && python -m spreeze_like.run --resume .
        plant(run, marker)
        proc = resume_cli(".", cwd=run)
    else:  # python -m spreeze_like.run --resume run, with evil.py in the current folder
        plant(tmp_path, marker)
        proc = resume_cli("run", cwd=tmp_path)
    assert not marker.exists(), "the saved env's module was imported"
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: --resume ") and f"--env {EVIL_ENV}" in lines[0] and "'evil'" in lines[0]


def test_finding04_naming_the_env_again_is_the_users_choice(tmp_path):
    run = saved_run(tmp_path / "run")
    line = parse_command_line(["--resume", str(run), "--env", EVIL_ENV])  # parsing imports nothing
    assert line.config.env == EVIL_ENV and line.sources["env"] == "flag"
    with pytest.raises(ConfigError, match="--env evil:Evil-v0"):
        parse_command_line(["--resume", str(run)])


def test_finding04_a_plain_gymnasium_id_resumes_without_naming_it(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps(TrainConfig().to_dict()))
    assert parse_command_line(["--resume", str(run)]).config.env == TrainConfig().env


@pytest.fixture(scope="module")
def shared_policy_run(tmp_path_factory) -> Path:
    """A trained Pendulum-v1 run whose checkpoint says ``evil:Pendulum-v1``, with ``evil.py`` in the folder:
    gymnasium's ``module:EnvId`` imports ``evil`` and then makes Pendulum-v1, so the policy would even score."""
    run = trained(tmp_path_factory.mktemp("runs")).run_dir
    (file,) = list_checkpoints(run)
    payload = torch.load(file, weights_only=True)
    payload["config"]["env"] = "evil:Pendulum-v1"
    torch.save(payload, file)
    return run


def test_finding04_evaluate_does_not_import_the_checkpoints_env_module(shared_policy_run, tmp_path):
    marker = tmp_path / "IMPORTED"
    plant(shared_policy_run, marker)
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run([sys.executable, "-m", "spreeze_like.evaluate", ".", "--episodes", "1"],
                          cwd=shared_policy_run, capture_output=True, text=True, check=False, timeout=120, env=env)
    assert not marker.exists(), "the checkpoint's env module was imported"
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and proc.stdout == "", proc.stderr
    assert lines[0].startswith("error: ") and "--env evil:Pendulum-v1" in lines[0] and "'evil'" in lines[0]

    # named again, the import is the user's choice: it runs, and so does the evaluation
    proc = subprocess.run([sys.executable, "-m", "spreeze_like.evaluate", ".", "--episodes", "1", "--env",
                           "evil:Pendulum-v1"], cwd=shared_policy_run, capture_output=True, text=True, check=False,
                          timeout=120, env=env)
    assert proc.returncode == 0 and marker.exists(), proc.stderr


def test_finding04_load_policy_names_the_env_or_refuses(shared_policy_run):
    with pytest.raises(ConfigError, match=r"load_policy\(path, env='evil:Pendulum-v1'\)"):
        load_policy(shared_policy_run)
    with pytest.raises(CheckpointError, match="is a policy for env 'evil:Pendulum-v1', not 'Pendulum-v1'"):
        load_policy(shared_policy_run, env="Pendulum-v1")
