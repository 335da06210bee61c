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

``torch.set_flush_denormal`` sets the flags of the calling thread (x86 MXCSR FTZ and DAZ), and a thread
starts with its creator's flags (POSIX ``pthread_create``), so torch's intra-op threads (its OpenMP pool)
flush if they are created after it and keep what they had if they existed before (measured on an
elementwise op; whether MKL's and oneDNN's matrix kernels run on that same pool was not checked). A
learner process calls :func:`set_learner_math` before its first torch op, so with
``--torch-threads`` > 1 its whole pool is created flushing; :func:`flushing_threads` measures it (the
learners record it in ``startup.json``, and a test runs learners at 2 threads). The processes that are
learners and nothing else call it: the learner processes (``procs/control.py``) and the CPU benchmarks of
learner steps (``tools/bench_explicit_grad.py``, ``bench_precision.py``, ``bench_learner_rate.py``,
``profile_critic_update.py``), so that they measure what the learners run. The serial trainer and the
autotuner's update probe (``probe_updates``, which tests call in their own process) may run in a caller's
process, whose other code may count on IEEE subnormals (hypothesis refuses to run without them: the test
suite found it), so they flush only while they train or measure, with :func:`flushed_subnormals`, and
then give the thread back as they found it. That block starts the pool before it flushes, so that no
thread created inside it keeps flushing after it: there, only the calling thread flushes (the serial
mode's and the probe's extra threads, at ``--torch-threads`` > 1, keep the default).

``SPREEZE_FLUSH_DENORMAL=0`` (a benchmark knob, like ``SPREEZE_FEEDER``) leaves flushing off, for
``tools/bench_flush_denormal.py``'s A/B. Owns no process or shared resource.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator

FLUSH_ENV = "SPREEZE_FLUSH_DENORMAL"
# Elements per thread of the pool probes: above ATen's grain size (32,768), so that an elementwise op on
# ``threads`` x this many gives each thread of the pool one whole share (``at::parallel_for``'s split).
_SHARE = 1 << 16


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


def _start_pool() -> None:
    """Make torch's intra-op pool exist at its present size (an elementwise op that each thread takes part in)."""
    import torch

    threads = torch.get_num_threads()
    if threads > 1:
        torch.zeros(threads * _SHARE).add_(1.0)


def flushing_threads() -> int:
    """How many of torch's intra-op threads (the calling one among them) flush subnormals now.

    Each thread doubles its share of the smallest subnormal float32: one that flushes reads it as 0 (DAZ);
    one that does not writes 2.8e-45. The input is made from its bits and copied, and the result is read
    as integers, so that no flushing thread changes what is measured. Starts the pool if it was not yet.
    """
    import torch

    threads = torch.get_num_threads()
    tiny = torch.tensor([1], dtype=torch.int32).view(torch.float32)  # 1.4e-45, the smallest subnormal
    doubled = tiny.expand(threads * _SHARE).contiguous() * 2.0
    kept = int(torch.count_nonzero(doubled.view(torch.int32)))
    return threads - round(kept / _SHARE)


def flushing_now() -> bool:
    """Whether this thread flushes subnormals now: the smallest subnormal double times 1 is then 0."""
    return math.ulp(0.0) * 1.0 == 0.0


@contextlib.contextmanager
def flushed_subnormals() -> Iterator[bool]:
    """Subnormals flushed in this thread for the block (unless turned off), then the thread's state before it.
    Yields whether flushing is on."""
    import torch

    before = flushing_now()
    _start_pool()  # threads are created before the flush, so none created in the block flushes after it
    try:
        yield _set_flush()
    finally:
        torch.set_flush_denormal(before)
