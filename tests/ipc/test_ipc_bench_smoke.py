"""tools/bench_ipc.py runs end to end (tiny counts; no speed is asserted here, see BENCHMARKS.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "tools" / "bench_ipc.py"


@pytest.mark.multiproc
def test_bench_ipc_smoke(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--scale", "0.005", "--repeats", "1", "--json", str(out)],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "ring / Queue at 1 per write" in proc.stdout
    result = json.loads(out.read_text())
    assert set(result["rates"]) == {"queue@1", "ring@1", "queue@256", "ring@256"}
    assert all(v > 0 for v in result["rates"].values())
    assert result["memcpy_bytes_per_s"] > 0
