"""Findings 13 and 14 of the security and reliability review: the native core must not trust what
it reads from shared memory or from a numpy array's strides.

- Finding 13: the ring core took ``write_seq``/``read_seq`` from the shared header as they were, so
  a corrupt counter made ``pop_into``/``push`` copy far past the mapping; ``capacity *
  record_bytes`` could overflow. The corrupting process and the victim are separate processes here,
  and the victim runs in a child, because before the fix it died of SIGSEGV.
- Finding 14: ``gather_rows`` took a column's row size from ``strides[0]``, which numpy leaves
  arbitrary for a dimension of length 1 (and for an empty array) while still calling the array
  C-contiguous; the 64-bit atomics ran on uint64 arrays whatever their alignment.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from spreeze_like.errors import ShmError
from spreeze_like.ipc import Ring, new_run_id, segment_name
from spreeze_like.ipc.ring import _CAPACITY, _READ_SEQ_OFF, _WIDTH, _WRITE_SEQ_OFF, DATA_OFFSET
from spreeze_like.native import _native

_VICTIM = r"""
import sys
import numpy as np
from spreeze_like.ipc import Ring
name, role, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
ring = Ring.attach(name, role)
print("attached", flush=True)
sys.stdin.readline()  # another process corrupts the counters now
rows = np.ones((n, ring.record_width), np.float32)
try:
    got = ring.pop_into(rows) if role == "reader" else ring.try_write(rows)
    print("copied", got, flush=True)
except Exception as exc:
    print("refused", type(exc).__name__, exc, flush=True)
"""


@pytest.mark.multiproc
@pytest.mark.parametrize(("role", "counter"), [("reader", _WRITE_SEQ_OFF), ("writer", _READ_SEQ_OFF)])
def test_finding13_corrupt_ring_counters_cannot_make_copies_leave_the_mapping(role, counter):
    # The other side's counter jumps 2^40 ahead: before the fix the victim trusted it and copied
    # 100,000 records (800 kB) through a 4-record ring, and died of SIGSEGV.
    ring = Ring.create(segment_name(new_run_id(), "ring"), capacity=4, record_width=2)
    victim = subprocess.Popen([sys.executable, "-c", _VICTIM, ring.name, role, "100000"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert victim.stdout.readline() == "attached\n", victim.stderr.read()
        _native.store_u64(ring._seg.mmap, counter, 2**40)
        out, err = victim.communicate("go\n", timeout=60)
    finally:
        if victim.poll() is None:
            victim.kill()
            victim.communicate()
        ring.close()
        ring.unlink()
    assert victim.returncode == 0, f"victim died with status {victim.returncode}: {err[-2000:]}"
    assert out.startswith("refused ShmError"), out
    assert "corrupt" in out and str(2**40) in out and "\n" not in out.strip()


def test_finding13_corrupt_ring_header_is_refused_at_attach():
    ring = Ring.create(segment_name(new_run_id(), "ring"), capacity=4, record_width=2)
    try:
        hdr = ring._seg.ndarray(np.uint64, 8, 0)
        # capacity * record bytes wraps to 0 in 64 bits: 2^62 records of 4 floats "fit" in any segment
        for word, value in [(_CAPACITY, 2**62), (_CAPACITY, 100), (_CAPACITY, 0), (_WIDTH, 0)]:
            good = int(hdr[word])
            hdr[word] = value
            try:
                with pytest.raises(ShmError, match="corrupt") as info:
                    Ring.attach(ring.name, "reader")
                assert "\n" not in str(info.value)
            finally:
                hdr[word] = good
        del hdr
    finally:
        ring.close()
        ring.unlink()


def test_finding13_ring_core_checks_its_size_for_overflow():
    buf = bytearray(DATA_OFFSET + 64)
    with pytest.raises(ValueError, match="runs past the end|too large"):
        _native.RingCore(buf, _WRITE_SEQ_OFF, _READ_SEQ_OFF, DATA_OFFSET, 2**62, 16)  # 2^66 bytes wraps to 0


_GATHER = r"""
import numpy as np
from numpy.lib.stride_tricks import as_strided
from spreeze_like.native import _native
gens, slots = np.zeros(1, np.uint64), np.array([0])
row = np.arange(3.0).reshape(1, 3)
one = as_strided(row, shape=(1, 3), strides=(1 << 30, 8))  # length-1 dimension: any stride, still C-contiguous
empty = as_strided(np.zeros((1, 0)), shape=(1, 0), strides=(1 << 30, 8))  # empty: C-contiguous too
assert one.flags.c_contiguous and empty.flags.c_contiguous
(a, b), first, torn = _native.gather_rows(gens, slots, (one, empty))
print(a.tolist(), b.shape, torn.tolist())
"""


@pytest.mark.multiproc
def test_finding14_gather_rows_takes_row_size_from_shape_not_strides():
    # Before the fix the row size was strides[0] = 1 GiB: a 1 GiB memcpy out of 24 bytes (SIGSEGV).
    proc = subprocess.run([sys.executable, "-c", _GATHER], check=False, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"status {proc.returncode}: {proc.stderr[-2000:]}"
    assert proc.stdout.strip() == "[[0.0, 1.0, 2.0]] (1, 0) []"


_NATURAL = r"""
import numpy as np
from spreeze_like.native import _native
column = np.arange(30.0).reshape(10, 3)[::5][:1]  # a slice of a strided view: its length-1 axis keeps stride 120
assert column.flags.c_contiguous and column.strides[0] == 120  # while one row is 24 bytes
(out,), _, torn = _native.gather_rows(np.zeros(1, np.uint64), np.array([0]), (column,))
print(out.tolist(), torn.tolist())
try:
    _native.gather_rows(np.zeros(1, np.uint64), np.array([0]), (np.array([None], dtype=object),))
except TypeError as exc:
    print("refused", exc)
"""


@pytest.mark.multiproc
def test_finding14_gather_rows_row_size_of_a_natural_view():
    # Not only as_strided reaches this. Before the fix: 120 bytes copied into a 24-byte result, and
    # glibc aborted the process on the corrupt heap. Object columns (pointers copied without
    # references) are refused too.
    proc = subprocess.run([sys.executable, "-c", _NATURAL], check=False, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"status {proc.returncode}: {proc.stderr[-2000:]}"
    lines = proc.stdout.splitlines()
    assert lines[0] == "[[0.0, 1.0, 2.0]] []"
    assert lines[1].startswith("refused") and "object" in lines[1]


def test_finding14_generation_atomics_refuse_misaligned_arrays():
    raw = np.zeros(8 * 8 + 8, np.uint8)
    gens = raw[1 : 1 + 8 * 8].view(np.uint64)  # 8 words, one byte off their natural alignment
    assert not gens.flags.aligned
    slots, cols = np.array([0, 3]), (np.zeros((8, 2), np.float32),)
    calls = {
        "generations_begin_write": lambda: _native.generations_begin_write(gens, slots),
        "generations_end_write": lambda: _native.generations_end_write(gens, slots),
        "generations_read": lambda: _native.generations_read(gens, slots),
        "generations_torn": lambda: _native.generations_torn(gens, slots, np.zeros(2, np.uint64)),
        "gather_rows": lambda: _native.gather_rows(gens, slots, cols),
        "u64_load": lambda: _native.u64_load(gens, 0),
        "u64_store": lambda: _native.u64_store(gens, 0, 1),
        "u64_compare_exchange": lambda: _native.u64_compare_exchange(gens, 0, 0, 1),
    }
    for name, call in calls.items():
        with pytest.raises(ValueError, match="8-byte aligned"):
            call()
            pytest.fail(f"{name} ran atomics on a misaligned array")
    assert not raw.any()  # and nothing was written

    tree = _native.SumTreeK8(np.zeros(_native.SumTreeK8.nbytes(8), np.uint8), 8, True)
    with pytest.raises(ValueError, match="8-byte aligned"):
        tree.update(slots, np.ones(2), gens[:2], gens)
