"""tools/profile_critic_update.py runs on the CPU, with the step and with it stubbed out (the host's own
work per update); the figures are not checked, the line that reports them is."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_profile_critic_update_reports_the_host_only_cost_on_the_cpu() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "profile_critic_update.py"), "--device", "cpu", "--device-replay", "on",
         "--host-only", "--sync-period", "8", "--updates", "20", "--rows", "2000", "--top", "5"],
        capture_output=True, text=True, timeout=300, check=True,
    ).stdout
    assert re.search(r"cpu batch 256 host only \(step stubbed\), MirrorBatches, weight sync every 8: [\d.]+ us per "
                     r"update", out), out
    assert "Self CPU" in out  # the profiler's table follows
