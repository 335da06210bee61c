"""tools/soak.py's transition accounting on made-up final status files (no run): the check must fail when a
transition is missing, also across a resume that loaded the saved replay (--save-replay)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SOAK = Path(__file__).resolve().parents[2] / "tools" / "soak.py"
spec = importlib.util.spec_from_file_location("soak_tool", SOAK)
soak = importlib.util.module_from_spec(spec)
spec.loader.exec_module(soak)

FLAGS = {"envs": 1, "buffer": 1_000_000, "save_replay": True}


def status(emitted: int, inserted: int, size: int, restarts: int = 0) -> dict:
    counters = {"sampler-0": {"env_steps": emitted, "nonfinite_dropped": 0},
                "replay": {"inserted": inserted, "size": size}}
    return {"env_steps": emitted, "counters": counters, "roles": {"sampler-0": {"restarts": restarts}}}


def test_a_first_session_holds_what_it_inserted():
    assert soak.check_session(status(1000, 990, 990), FLAGS)["ok_ack"]
    assert not soak.check_session(status(1000, 990, 989), FLAGS)["ok_ack"]  # a row lost from replay


@pytest.mark.parametrize(("carried", "size", "ok"), [(990, 1490, True), (990, 1489, False), (0, 500, True),
                                                     (0, 1490, False)])
def test_a_resumed_session_also_holds_the_rows_it_loaded(carried, size, ok):
    assert soak.check_session(status(510, 500, size), FLAGS, carried)["ok_ack"] is ok


def test_the_loaded_line_is_read_from_the_log():
    text = "[spreeze] x\n[spreeze] replay: 84,132 transitions loaded from replay_0000084170 (saved with this checkpoint)\n"
    assert [int(n.replace(",", "")) for n in soak.LOADED.findall(text)] == [84132]


@pytest.mark.multiproc
@pytest.mark.parametrize("how", ["sigterm", "sigkill", "a run exits early"])
def test_a_soak_that_ends_early_ends_the_runs_it_started(tmp_path, how):
    """The soak's runs train for 10**9 env steps: before 2026-12-03 a soak killed by SIGTERM or SIGKILL, or ended by
    one run's early exit, or by its own crash, left the runs training for ever (seen: ``--minutes -1`` crashed after
    starting both). Its runs are grandchildren of this test, so the leak check of conftest cannot see them: their
    supervisors are found here, and must be gone with every process of theirs."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import psutil

    proc = subprocess.Popen([sys.executable, str(SOAK), "--minutes", "5", "--kill-every", "600", "--samplers", "1",
                             "--logdir", str(tmp_path)], cwd=SOAK.parents[1], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    family: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # both runs started and training (their status.json written)
            family = psutil.Process(proc.pid).children(recursive=True)
            if len(list(tmp_path.glob("*/*/status.json"))) == 2 and len(family) >= 2 * 5:
                break
            time.sleep(0.5)
        assert len(list(tmp_path.glob("*/*/status.json"))) == 2, proc.stdout.read() if proc.poll() else "not started"
        if how == "sigterm":
            proc.send_signal(signal.SIGTERM)
            expected = 128 + signal.SIGTERM
        elif how == "sigkill":  # nothing of the soak runs: its runs see it gone (launcher_env) and stop in order
            proc.kill()
            expected = -signal.SIGKILL
        else:
            supervisors = [p for p in psutil.Process(proc.pid).children() if "undisturbed" in " ".join(p.cmdline())]
            supervisors[0].kill()  # the undisturbed run dies: the soak ends, and must end the disturbed one
            expected = 1
        code = proc.wait(timeout=120)
        _, alive = psutil.wait_procs(family, timeout=30)
        left = [(p.pid, " ".join(p.cmdline()[-4:])) for p in alive if p.is_running()]
    finally:
        if proc.poll() is None:
            proc.kill()
        for p in family:  # a failing check must not leave them to the tests after it (they would train for ever)
            if p.is_running():
                p.kill()
        psutil.wait_procs(family, timeout=30)
    assert code == expected, proc.stdout.read()
    assert not left, left
    assert not [n for n in os.listdir("/dev/shm") if any(f".{p.pid}." in n for p in family)]
