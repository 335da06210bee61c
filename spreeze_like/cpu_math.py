"""How a learner sets up its CPU math: its torch threads, and subnormal floats flushed to zero.

Why flush: arithmetic on a float32 below 1.2e-38 (subnormal) takes the CPU's slow microcode path
(here it made torch's fused Adam 10x slower, below). A learner makes them as it trains: the Adam
moments of a weight whose gradient is zero (a ReLU unit dead on the whole batch) decay by 0.9 per
update and take about 150 updates to cross the subnormal range, while other weights' enter it. Measured here (2026-11-30, 2-vCPU Xeon, SAC critic 96x96
at batch 256, one thread, fp32, synthetic replay): after 1,000-4,000 updates 4-9% of the critic's
Adam moments were subnormal (each at a weight whose gradient was exactly 0) and the learner's fused
Adam calls averaged 84-130 us instead of 13-15 (with flushing, none are and it stays at 13-15).
Flushing makes them 0, a value that changes nothing here: a moment of 1e-38 moves a weight by about
1e-33. JAX on the CPU (XLA's CPU client executes under ``tsl::port::ScopedFlushDenormal``, "to match
the default TF ThreadPool behavior"; so SBX) and TensorFlow run with flushing on; PyTorch leaves it off
unless asked (``torch.set_flush_denormal``).

``torch.set_flush_denormal`` sets the flags of the calling thread (x86 MXCSR FTZ and DAZ): the
learner's own thread, which does all of its work at the default ``--torch-threads 1``; with more
threads, the extra intra-op threads keep the default. The processes that are learners and nothing else
call :func:`set_learner_math`: the learner processes (``procs/control.py``) and the CPU benchmarks of
learner steps (``tools/bench_explicit_grad.py``, ``bench_precision.py``, ``bench_learner_rate.py``,
``profile_critic_update.py``), so that they measure what the learners run. The serial trainer and the
autotuner's update probe (``probe_updates``, which tests call in their own process) may run in a caller's
process, whose other code may count on IEEE subnormals (hypothesis refuses to run without them: the test
suite found it), so they flush only while they train or measure, with :func:`flushed_subnormals`, and
then give the thread back as they found it.

``SPREEZE_FLUSH_DENORMAL=0`` (a benchmark knob, like ``SPREEZE_FEEDER``) leaves flushing off, for
``tools/bench_flush_denormal.py``'s A/B. Owns no process or shared resource.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator

FLUSH_ENV = "SPREEZE_FLUSH_DENORMAL"


def flush_wanted() -> bool:
    """Whether learners flush subnormals (on unless ``SPREEZE_FLUSH_DENORMAL=0``)."""
    return os.environ.get(FLUSH_ENV, "1") != "0"


def _set_flush() -> bool:
    """Flushing in this thread as :func:`flush_wanted` says; whether it is on (False also on a CPU without it)."""
    import torch

    wanted = flush_wanted()
    return torch.set_flush_denormal(wanted) and wanted  # True when the CPU can (x86 with SSE3), whichever was asked


def set_learner_math(threads: int) -> bool:
    """``threads`` torch CPU threads for this process, and subnormals flushed to zero in this thread (unless
    turned off; see the module docstring). Returns whether flushing is on (False also on a CPU without it)."""
    import torch

    torch.set_num_threads(threads)
    return _set_flush()


def flushing_now() -> bool:
    """Whether this thread flushes subnormals now: the smallest subnormal double times 1 is then 0."""
    return math.ulp(0.0) * 1.0 == 0.0


@contextlib.contextmanager
def flushed_subnormals() -> Iterator[bool]:
    """Subnormals flushed in this thread for the block (unless turned off), then the thread's state before it.
    Yields whether flushing is on."""
    import torch

    before = flushing_now()
    try:
        yield _set_flush()
    finally:
        torch.set_flush_denormal(before)
