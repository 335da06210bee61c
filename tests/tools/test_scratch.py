"""tools/scratch.py: a benchmark's runs go to the folder the user names (kept), else to a scratch folder that is
removed when the benchmark ends well and kept, with its path said, when it fails."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def runs_folder(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(ROOT / "tools"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "temp"))  # mkdtemp's folder, for this test only
    (tmp_path / "temp").mkdir()
    from scratch import runs_folder

    return runs_folder


def test_a_scratch_folder_is_removed_after_a_clean_end(runs_folder, tmp_path):
    with runs_folder(None, "bench_x_") as path:
        assert path.parent == tmp_path / "temp" and path.name.startswith("bench_x_")
        (path / "run" / "log.txt").parent.mkdir()
        (path / "run" / "log.txt").write_text("a run's log")
    assert not path.exists()


def test_a_scratch_folder_is_kept_and_named_when_the_benchmark_fails(runs_folder, capsys):
    with pytest.raises(SystemExit, match="see .*log.txt"), runs_folder("", "bench_x_") as path:
        (path / "log.txt").write_text("why it failed")
        raise SystemExit(f"error: the run exited 1; see {path / 'log.txt'}")
    assert (path / "log.txt").read_text() == "why it failed"  # the log the error points at is still there
    assert capsys.readouterr().err.strip() == f"# the runs' folder is kept for a look: {path}"


def test_a_folder_the_user_names_is_made_and_kept(runs_folder, tmp_path):
    mine = tmp_path / "mine" / "runs"
    with runs_folder(str(mine), "bench_x_") as path:
        assert path == mine and path.is_dir()
        (path / "log.txt").write_text("kept")
    assert (mine / "log.txt").read_text() == "kept"
    assert not list((tmp_path / "temp").iterdir())  # no scratch folder was made beside it
