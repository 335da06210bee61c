"""The supervisor's side of remote samplers, with real processes and no Ray (issue 16).

The ``ray-bridge`` child is a stand-in (``fake_ray_bridge.py``) spawned in the real bridge's place;
the preflight is run against a loopback socket that accepts (the stand-in never connects) or a port
that refuses. The end-to-end runs with Ray are in tests/remote (a real cluster in a private network
namespace).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from spreeze_like.checkpoint import load_latest
from spreeze_like.procs import pacing
from tests.remote.loopback import SETTINGS_FRAME, loopback_server, refusing_port

from .fake_ray_bridge import REMOTE_RESTARTS, STEPS_VAR
from .helpers import TINY_ARGS, assert_nothing_left, cli_env, only_run_dir, read_status, scalars, text_tags

pytestmark = pytest.mark.multiproc

TESTS_DIR = str(Path(__file__).resolve().parents[1])
FAKE_BRIDGE = "parallel.fake_ray_bridge"
# The CLI, with the supervisor's bridge module replaced by the stand-in (children import it from tests/).
# Ray need not be installed: the supervisor only asks importlib whether it is there (it never imports it;
# the bridge does, and the stand-in does not), so the CLI is told it is, whatever this venv has.
CLI_WITH_FAKE_BRIDGE = (
    "import importlib.machinery, importlib.util, sys\n"
    "found = importlib.util.find_spec\n"
    "importlib.util.find_spec = lambda name, *a: (importlib.machinery.ModuleSpec(name, None) if name == 'ray'\n"
    "                                             else found(name, *a))\n"
    "import spreeze_like.supervisor as supervisor\n"
    f"supervisor.BRIDGE_MODULE = {FAKE_BRIDGE!r}\n"
    "from spreeze_like.run import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)
# The CLI where importlib finds no Ray (as without the [ray] extra), whatever this venv has.
CLI_WITHOUT_RAY = (
    "import importlib.util, sys\n"
    "found = importlib.util.find_spec\n"
    "importlib.util.find_spec = lambda name, *a: None if name.split('.')[0] == 'ray' else found(name, *a)\n"
    "from spreeze_like.run import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


def run_python(code: str, *args: str, env: dict[str, str] | None = None, timeout: float = 300
               ) -> subprocess.CompletedProcess:
    full = {**cli_env(), **(env or {}), "PYTHONPATH": os.pathsep.join([TESTS_DIR, os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-c", code, *args], check=False, capture_output=True, text=True,
                          timeout=timeout, env=full)


def error_lines(proc: subprocess.CompletedProcess) -> list[str]:
    return [line for line in proc.stderr.splitlines() if line.startswith("error: ")]


@pytest.fixture
def listening_port():
    """A loopback TCP port that accepts and answers the greeting as a Ray GCS does (the preflight's check)."""
    with loopback_server(SETTINGS_FRAME) as port:
        yield port


def test_an_abandoned_remote_row_hands_its_steps_to_the_local_sampler_after_a_bridge_crash(tmp_path, listening_port):
    """1 local + 1 remote row, 1200 steps (quotas 600 + 600). The stand-in bridge takes 200 steps on the remote
    row, crashes, is restarted, and gives the row up: sampler-0 must take 1000 steps, the run exactly 1200, the
    critic the serial count of updates; the restart is counted, status.json and TensorBoard show the remote row."""
    total, remote_steps = 1200, 200
    proc = run_python(CLI_WITH_FAKE_BRIDGE, *TINY_ARGS, "--samplers", "1", "--ray", f"127.0.0.1:{listening_port}",
                      "--remote-samplers", "1", "--remote-batch", "256", "--total-steps", str(total),
                      "--logdir", str(tmp_path / "runs"), env={STEPS_VAR: str(remote_steps)})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "ray-bridge (pid" in proc.stdout and "restarting it in" in proc.stdout
    assert f"remote sampler-1 was given up after {remote_steps} env steps; its {600 - remote_steps} steps left go " \
           "to sampler-0" in proc.stdout
    run_dir = only_run_dir(tmp_path / "runs")
    status = read_status(run_dir)
    assert status["state"] == "finished" and status["env_steps"] == total
    assert status["roles"]["ray-bridge"]["restarts"] == 1 and "sampler-1" not in status["roles"]  # no local process
    counters = status["counters"]
    assert counters["sampler-1"]["env_steps"] == remote_steps and counters["sampler-1"]["abandoned"] == 1
    assert counters["sampler-0"]["env_steps"] == total - remote_steps
    assert counters["control"]["quota-0"] == total - remote_steps and counters["control"]["quota-1"] == remote_steps
    assert counters["ray-bridge"]["connected"] == 1
    live = status["live"]  # what every write carries (tools/bench_remote.py's rates): the same final figures
    assert live["sampler-1"]["env_steps"] == remote_steps and live["sampler-0"]["env_steps"] == total - remote_steps
    assert live["ray-bridge"]["rows_written"] == counters["ray-bridge"]["rows_written"] and "cpu_s" in live["ray-bridge"]
    assert counters["replay"]["inserted"] == total  # the remote row's ring reached replay too
    start = pacing.learn_after(64, 300)  # TINY_ARGS: batch 64, learning starts 300
    assert counters["critic-learner"]["total_updates"] == pacing.critic_budget(total, start, 1.0)
    assert status["remote_samplers"]["samplers"]["sampler-1"]["state"] == "abandoned"  # the bridge's file, as written
    tb = scalars(run_dir)
    assert tb["stats/restarts"][-1][1] == 1 + REMOTE_RESTARTS  # the supervisor's restart plus the remote actor's
    assert tb["remote/sampler-1/restarts"][-1][1] == REMOTE_RESTARTS
    assert tb["remote/sampler-1/steps_per_s"] and tb["remote/sampler-1/policy_lag"]
    assert "remote/sampler-0/steps_per_s" not in tb  # a local row has no remote scalars
    assert "remote/sampler-1/node" in text_tags(run_dir)
    payload, _ = load_latest(run_dir)  # remote rows' counters are in the checkpoint like local ones'
    assert payload["roles"]["sampler-1"]["env_steps"] == remote_steps
    assert payload["roles"]["sampler-0"]["env_steps"] == total - remote_steps
    assert_nothing_left(run_dir)


def test_no_sampler_left_for_an_abandoned_remote_row_is_one_line_and_exit_2(tmp_path, listening_port):
    proc = run_python(CLI_WITH_FAKE_BRIDGE, *TINY_ARGS, "--samplers", "0", "--ray", f"127.0.0.1:{listening_port}",
                      "--remote-samplers", "1", "--total-steps", "1000", "--logdir", str(tmp_path / "runs"),
                      env={STEPS_VAR: "0"})
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = error_lines(proc)
    assert len(lines) == 1 and lines[0].startswith("error: no sampler can be placed: remote sampler-0 was given up "
                                                   "with 1,000 of its env steps left"), proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    run_dir = only_run_dir(tmp_path / "runs")
    status = read_status(run_dir)
    assert status["state"] == "failed" and status["failure"].startswith("no sampler can be placed")
    assert_nothing_left(run_dir)


def test_ray_missing_is_one_line_exit_2_before_any_segment(tmp_path, listening_port):
    proc = run_python(CLI_WITHOUT_RAY, *TINY_ARGS, "--ray", f"127.0.0.1:{listening_port}", "--remote-samplers", "1",
                      "--logdir", str(tmp_path / "runs"), timeout=120)
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert error_lines(proc) == ['error: --ray needs Ray: pip install "spreeze_like[ray]"'], proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    run_dir = only_run_dir(tmp_path / "runs")
    assert not (run_dir / "shm.json").exists()  # refused before the segments
    assert read_status(run_dir)["state"] == "failed"


def test_an_address_that_refuses_is_one_line_exit_2_within_30_s(tmp_path):
    port = refusing_port()
    t0 = time.monotonic()
    proc = run_python(CLI_WITH_FAKE_BRIDGE, *TINY_ARGS, "--ray", f"127.0.0.1:{port}", "--remote-samplers", "1",
                      "--logdir", str(tmp_path / "runs"), timeout=120)
    took = time.monotonic() - t0
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = error_lines(proc)
    assert len(lines) == 1 and lines[0].startswith(f"error: --ray 127.0.0.1:{port}: no Ray cluster answers at "
                                                   f"127.0.0.1:{port}"), proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert took < 30, took
    assert not (only_run_dir(tmp_path / "runs") / "shm.json").exists()


def test_an_address_that_accepts_and_never_answers_is_one_line_exit_2_before_any_segment(tmp_path):
    # another service's port, or a wrong one: ray.init would retry there for minutes; the greeting finds it
    with loopback_server(None) as port:
        t0 = time.monotonic()
        proc = run_python(CLI_WITH_FAKE_BRIDGE, *TINY_ARGS, "--ray", f"127.0.0.1:{port}", "--remote-samplers", "1",
                          "--logdir", str(tmp_path / "runs"), timeout=120)
        took = time.monotonic() - t0
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    expected = (f"error: --ray 127.0.0.1:{port}: no Ray cluster answers at 127.0.0.1:{port} (it accepted a "
                f"connection but sent nothing back to an HTTP/2 greeting; waited up to 5 s); start one there "
                f"(ray start --head --port={port}) or give its head's host:port")
    assert error_lines(proc) == [expected], proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert took < 30, took
    assert not (only_run_dir(tmp_path / "runs") / "shm.json").exists()


def test_auto_resolves_from_ray_address(tmp_path):
    """``--ray auto`` takes $RAY_ADDRESS (the line names both) and refuses as fast as a typed address."""
    port = refusing_port()
    proc = run_python(CLI_WITH_FAKE_BRIDGE, *TINY_ARGS, "--ray", "auto", "--remote-samplers", "1",
                      "--logdir", str(tmp_path / "runs"), env={"RAY_ADDRESS": f"127.0.0.1:{port}"}, timeout=120)
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert error_lines(proc)[0].startswith(f"error: --ray auto (127.0.0.1:{port}): no Ray cluster answers"), proc.stderr
