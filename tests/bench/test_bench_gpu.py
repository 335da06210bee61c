"""tools/bench_gpu.py --device cpu --quick: the proof script's code paths run on the CPU and write their figures.

On a GPU machine the same script times CUDA graphs, the device mirror and two learner processes;
here it must run every section the CPU can (no GPU tests: they skip), fast, and leave nothing behind.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import leftover_segments  # tests/conftest.py: the leak check every test gets

ROOT = Path(__file__).resolve().parents[2]


def test_bench_gpu_quick_on_cpu_writes_every_section(tmp_path):
    out = tmp_path / "bench_gpu.json"
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "bench_gpu.py"), "--device", "cpu", "--quick",
                           "--json", str(out)], capture_output=True, text=True, timeout=240, cwd=ROOT,
                          check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = json.loads(out.read_text())
    errors = {k: v["error"] for k, v in results.items() if isinstance(v, dict) and "error" in v}
    assert not errors, errors
    assert results["env"]["device"] == "cpu"
    assert "skipped" in results["tests"]  # no CUDA here: said so, not presented as passing
    assert results["steps"]["256"]["eager"]["updates_per_s"] > 0
    assert results["critic"]["mirror/256"]["device_replay"] == "MirrorBatches"
    assert results["critic"]["host/256"]["device_replay"] == "HostBatches"
    block = results["critic"]["block4/256"]  # four updates per replay: every timed update ran
    assert block["updates_per_graph"] == 4 and block["pending_at_stop"] == 0 and block["updates_per_s"] > 0
    entry_errors = {k: v["error"] for k, v in results["critic"].items() if isinstance(v, dict) and "error" in v}
    assert not entry_errors, entry_errors  # an entry records its own error and the others go on
    assert results["critic"]["sync8/256"]["updates_per_s"] > 0
    assert results["critic"]["samestream/256"]["updates_per_s"] > 0
    assert results["critic"]["separate/256"]["updates_per_s"] > 0  # the A/B of the critic's layouts ran
    assert not results["critic"]["best"]["key"].startswith("separate")  # the best figure is of our layout
    assert "critic mirror/256:" in proc.stdout  # each entry is printed as it lands (a cut-short section keeps them)
    assert results["critic"]["best"]["frames_per_s"] > 0
    assert results["peer"]["critic_updates_per_s"] > 0 and results["peer"]["ratio_ours_over_peer_critic"] > 0
    dual = results["dual"]
    assert dual["dual"]["critic"]["updates_per_s"] > 0 and dual["dual"]["actor"]["updates_per_s"] > 0
    assert dual["dual"]["critic"]["copy_version"] > 1  # the critic process loaded the actor's publishes
    points = results["sampling"]["envs"]["HalfCheetah-v5"]["points"]
    assert points and all(p["steps_per_s"] > 0 for p in points)
    assert "figure" in proc.stdout and "ratio_dual_over_single" in proc.stdout


def _no_cuda() -> bool:
    from spreeze_like.devices import cuda_device_count

    return cuda_device_count() == 0


@pytest.mark.parametrize("tool", ["bench_gpu.py", "profile_critic_update.py", "bench_critic_layout.py",
                                  "bench_precision.py", "bench_learner_rate.py"])
def test_a_gpu_this_machine_lacks_is_one_line_and_exit_2(tool):
    """Every tool with a --device (devices.tool_device). Before: bench_gpu printed a traceback per section and
    then waited 300 s on its dual section's dead learners; the others a traceback from inside torch or the
    config."""
    if not _no_cuda():
        pytest.skip("this machine has a GPU: the refusal is for one without")
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / tool), "--device", "cuda:0"], capture_output=True,
                          text=True, timeout=60, cwd=ROOT, check=False)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stderr.splitlines() == [("error: --device cuda:0: CUDA is not available on this machine; use --device "
                                         "cpu or auto")]


def test_a_dual_learner_that_fails_ends_the_section_at_once_and_leaves_nothing(monkeypatch):
    """A learner process that cannot run (here: asked for a GPU that is not there) is reported by the parent
    within seconds, with its error, and the boards it shared are unlinked."""
    if not _no_cuda():
        pytest.skip("needs a machine without CUDA to make the learners fail")
    monkeypatch.syspath_prepend(str(ROOT / "tools"))  # the spawned learners import it by name too
    import gpu_rates
    before = set(os.listdir("/dev/shm"))
    t0 = time.monotonic()
    # RuntimeError on a CPU build of torch; its subclass AcceleratorError ("driver insufficient") on a CUDA build
    with pytest.raises(RuntimeError, match=r"dual learners: the (critic|actor) learner failed: (Runtime|Accelerator)Error"):
        gpu_rates.dual_vs_single("cuda:0", 256, 0.1, rows=2000)
    assert time.monotonic() - t0 < 60  # it waited 300 s for a report that never came
    # segments of this process or of a dead one (its learners): a live neighbour's (another test session, an
    # xdist worker) come and go on their own
    assert not leftover_segments(before)
