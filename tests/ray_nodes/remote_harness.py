"""Shared pieces of the Ray tests: why they skip, the cluster fixture's body, and CLI runs against the cluster.

The cluster (``tools/ray_cluster.py``: a head with no CPUs, one worker node with one CPU) lives in a private
network namespace with only loopback. The test process enters it with ``private_netns()`` for the module
(the CLI runs it starts inherit it) and leaves it at teardown, after the cluster is killed by pid.

This folder has no ``__init__.py`` (as most test folders here) and is not named ``ray``: on pytest's sys.path a
folder of that name is a namespace package that ``find_spec("ray")`` reports when Ray is not installed. Its
modules are imported by file name (``remote_harness``), so their names must stay unique.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import ray_cluster

# Small networks and budgets: the runs check processes, rows and protocols (as tests/parallel's TINY_ARGS).
TINY = ["--hidden-sizes", "32", "32", "--batch-size", "64", "--learning-starts", "300", "--eval-episodes", "2",
        "--eval-every", "0", "--log-interval", "0", "--tb-interval", "0.5", "--buffer-size", "20000"]
ACTOR_CLASS = "SamplerActor"  # spreeze_like/remote/ray_handles.py: Ray titles its process ray::SamplerActor[.method]


def ray_installed() -> bool:
    """Ray itself, not a namespace package made of this test folder (named ``ray``) when Ray is absent."""
    spec = importlib.util.find_spec("ray")
    return spec is not None and spec.origin is not None


def skip_reason() -> str | None:
    if not ray_installed():
        return 'Ray is not installed (pip install -e ".[test,ray]")'
    return ray_cluster.netns_unavailable_reason()


def start_cluster(workers: int = 1, worker_cpus: int = 1) -> ray_cluster.LocalCluster:
    """Called inside ``private_netns()``: the test port plan (GCS 6500, nodes from 23000)."""
    return ray_cluster.LocalCluster(workers=workers, worker_cpus=worker_cpus, first_port=23000, gcs_port=6500).start()


def cli_env(cluster: ray_cluster.LocalCluster) -> dict[str, str]:
    return {**cluster.env(), "PYTHONWARNINGS": "ignore", "PYTHONUNBUFFERED": "1"}


def cli(cluster: ray_cluster.LocalCluster, *args: str) -> list[str]:
    return [sys.executable, "-m", "spreeze_like.run", "--ray", cluster.address, *args]


def run_cli(cluster: ray_cluster.LocalCluster, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(cli(cluster, *args), capture_output=True, text=True, timeout=timeout, env=cli_env(cluster),
                          check=False)


def start_cli(cluster: ray_cluster.LocalCluster, *args: str, log: Path) -> subprocess.Popen:
    out = open(log, "w")  # noqa: SIM115 - the child holds it; closed by its exit
    return subprocess.Popen(cli(cluster, *args), stdout=out, stderr=subprocess.STDOUT, env=cli_env(cluster), text=True)


def remote_info(run_dir: Path) -> dict:
    """``<run_dir>/remote_samplers.json`` (the bridge's view of each remote sampler), {} before it exists."""
    try:
        return json.loads((run_dir / "remote_samplers.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def wait_for(predicate, timeout: float, proc: subprocess.Popen | None = None, log: Path | None = None,
             what: str = "condition"):
    """Poll ``predicate()`` until it returns something truthy; fail early if ``proc`` exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = predicate()
        if got:
            return got
        if proc is not None and proc.poll() is not None:
            text = log.read_text() if log is not None else ""
            raise AssertionError(f"the run exited with {proc.returncode} before the {what}:\n{text[-3000:]}")
        time.sleep(0.2)
    raise AssertionError(f"{what} not met within {timeout} s" + (f":\n{log.read_text()[-3000:]}" if log else ""))


def kill_quietly(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=30)


def hidden_ray_argv(*args: str) -> list[str]:
    """``python -m spreeze_like.run ARGS`` in an interpreter where ``import ray`` fails and find_spec says None.

    ``sys.modules["ray"] = None`` is how Python marks a module as not importable: ``import ray`` raises
    ImportError and ``importlib.util.find_spec("ray")`` returns None, as on a machine without Ray.
    """
    code = ("import runpy, sys; sys.modules['ray'] = None; sys.argv = ['spreeze_like.run'] + sys.argv[1:]; "
            "runpy.run_module('spreeze_like.run', run_name='__main__', alter_sys=True)")
    return [sys.executable, "-c", code, *args]


def one_error_line(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr[-3000:]
    return lines[0]

