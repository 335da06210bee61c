"""The leak check every test gets (tests/conftest.py's ``no_leftovers``) can fail: a test that leaves a process or a
segment of ours behind is reported, and what it left is removed.

The inner session loads tests/conftest.py as a plugin (``-p conftest``) and runs two tests that each leave one
thing behind; without this, a check that had stopped working (as the xdist grouping once had, unseen: see
tests/test_xdist_groups.py) would look the same as a suite with no leaks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import SHM_DIR, _our_names

TESTS = Path(__file__).resolve().parent

LEAKY = '''
import os, subprocess, sys
from spreeze_like.ipc.naming import shm_prefix

def test_leaves_a_process():
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])

def test_leaves_a_segment():
    # named as a run names its segments: spz.<run>.<creator pid>.<kind>.<index>
    with open(os.path.join("/dev/shm", f"{shm_prefix()}.leakcheck.{os.getpid()}.ring.0"), "wb") as f:
        f.write(b"x")

def test_leaves_nothing():
    pass
'''


def test_a_leaked_process_and_segment_each_fail_their_test_and_are_removed(tmp_path):
    (tmp_path / "test_leaky.py").write_text(LEAKY)
    before = _our_names()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "conftest", "-p", "no:cacheprovider",
                           "--rootdir", str(tmp_path), str(tmp_path / "test_leaky.py")],
                          capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])})
    out = done.stdout
    assert done.returncode == 1, out[-3000:] + done.stderr[-2000:]
    assert "3 passed, 2 errors" in out, out[-3000:]
    assert "ERROR at teardown of test_leaves_a_process" in out and "processes left alive: " in out, out[-3000:]
    assert "ERROR at teardown of test_leaves_a_segment" in out and "shared memory left behind: " in out, out[-3000:]
    assert "leakcheck" not in " ".join(_our_names() - before)  # the check removed it
    assert not [n for n in os.listdir(SHM_DIR) if ".leakcheck." in n]
