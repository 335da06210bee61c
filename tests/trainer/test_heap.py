"""procs/heap.py: pinned glibc thresholds stop a learner step from faulting its memory in every update."""

from __future__ import annotations

import subprocess
import sys

import pytest

STEP_FAULTS = """
import resource, sys, torch
torch.set_num_threads(1)
from spreeze_like.procs.heap import keep_freed_heap_memory
if sys.argv[1] == "pinned":
    assert keep_freed_heap_memory()
from spreeze_like.algos import make_actor_part
from spreeze_like.algos.base import Batch
from spreeze_like.algos.spec import AlgoSpec
part = make_actor_part(AlgoSpec(algo="sac", obs_dim=3, act_dim=1, precision="bf16"), "cpu")
g = torch.Generator().manual_seed(0)
batch = Batch(torch.randn(256, 3, generator=g), torch.rand(256, 1, generator=g), torch.randn(256, generator=g),
              torch.randn(256, 3, generator=g), torch.zeros(256))
def step():
    with part.autocast():
        part.step(batch)
for _ in range(30):
    step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(100):
    step()
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 100)
"""


def _faults_per_step(mode: str) -> float:
    out = subprocess.run([sys.executable, "-c", STEP_FAULTS, mode], capture_output=True, text=True, check=True)
    return float(out.stdout.strip())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_pinned_heap_thresholds_stop_the_page_fault_churn_of_an_actor_step():
    """With glibc's adaptive defaults this step maps and unmaps its temporaries (about 100 minor page
    faults per step here); with the thresholds pinned, as every learner process does, it reuses them."""
    default, pinned = _faults_per_step("default"), _faults_per_step("pinned")
    assert pinned < 1.0, (default, pinned)
    if default < 10:  # glibc's adaptive threshold happened to settle high on this machine: nothing to compare
        pytest.skip(f"the default heap took only {default} faults per step here")
