"""The name prefix ``$SPREEZE_LIKE_SHM_PREFIX``: separate sets of runs never sweep or list each other's
segments (what lets pytest-xdist workers share /dev/shm), and a bad value is one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from spreeze_like.errors import ShmError
from spreeze_like.ipc import list_our_files, new_run_id, parse_name, segment_name, sweep_dead_segments
from spreeze_like.ipc.naming import PREFIX_ENV, shm_prefix

ROOT = Path(__file__).resolve().parents[2]


def _dead_pid() -> int:
    out = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], check=True, capture_output=True)
    return int(out.stdout)


def test_the_prefix_names_segments_and_only_its_own_names_parse(monkeypatch):
    monkeypatch.delenv(PREFIX_ENV, raising=False)
    run = new_run_id()
    default = segment_name(run, "ring", 1)
    assert shm_prefix() == "spz" and default.startswith(f"/spz.{run}.")
    monkeypatch.setenv(PREFIX_ENV, "spzt7")
    tagged = segment_name(run, "ring", 1)
    assert tagged == f"/spzt7.{run}.{os.getpid()}.ring.1"
    assert parse_name(tagged) is not None and parse_name("sem." + tagged[1:]) is not None
    assert parse_name(default) is None  # another prefix's name is not ours
    monkeypatch.setenv(PREFIX_ENV, "")  # empty means unset, as for most variables
    assert shm_prefix() == "spz" and parse_name(default) is not None and parse_name(tagged) is None


def test_a_sweep_removes_dead_leftovers_of_its_own_prefix_only(tmp_path, monkeypatch):
    run, dead = new_run_id(), _dead_pid()
    names = {}
    for prefix in ("spz", "spzgw0", "spzgw1"):
        monkeypatch.setenv(PREFIX_ENV, prefix)
        names[prefix] = segment_name(run, "ring", 0, dead)[1:]
        (tmp_path / names[prefix]).write_bytes(b"x" * 64)
    monkeypatch.setenv(PREFIX_ENV, "spzgw0")
    assert list_our_files(str(tmp_path)) == [names["spzgw0"]]
    assert sweep_dead_segments(str(tmp_path)) == [names["spzgw0"]]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([names["spz"], names["spzgw1"]])
    monkeypatch.delenv(PREFIX_ENV)
    assert sweep_dead_segments(str(tmp_path)) == [names["spz"]]  # the default prefix is no wildcard either
    assert [p.name for p in tmp_path.iterdir()] == [names["spzgw1"]]


@pytest.mark.parametrize("bad", ["spz.x", "SPZ", "foo", "spzGW0", "spz" + "a" * 17, "spz/x"])
def test_a_bad_prefix_is_one_error_line(monkeypatch, bad):
    monkeypatch.setenv(PREFIX_ENV, bad)
    with pytest.raises(ShmError) as info:
        segment_name(new_run_id(), "ring")
    assert "\n" not in str(info.value) and PREFIX_ENV in str(info.value) and "unset it" in str(info.value)


def test_a_bad_prefix_stops_a_run_and_the_doctor_with_one_line(tmp_path):
    env = {**os.environ, PREFIX_ENV: "spz.bad"}
    run = subprocess.run([sys.executable, "-m", "spreeze_like.run", "--env", "Pendulum-v1", "--no-serial",
                          "--total-steps", "300", "--logdir", str(tmp_path / "runs")],
                         env=env, capture_output=True, text=True, timeout=120, check=False)
    doctor = subprocess.run([sys.executable, str(ROOT / "tools" / "shm_doctor.py"), "--shm-dir", str(tmp_path)],
                            env=env, capture_output=True, text=True, timeout=60, check=False)
    for out in (run, doctor):
        assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: {PREFIX_ENV}='spz.bad'"), out.stderr


def test_this_worker_names_segments_with_its_own_prefix():
    """tests/conftest.py gives each pytest-xdist worker a prefix of its own; a serial run keeps the default."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker:
        pytest.skip("not a pytest-xdist worker")
    session = os.environ["PYTEST_XDIST_TESTRUNUID"][:8].lower()
    assert shm_prefix() == f"spz{worker}{session}"
    assert segment_name(new_run_id(), "ring").startswith(f"/spz{worker}{session}.")
