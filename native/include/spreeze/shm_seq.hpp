// Sequence-number protocols on shared memory: the SPSC ring publish and the double-buffered seqlock.
//
// Everything here works on raw addresses inside a mapped POSIX shared-memory segment. A 64-bit
// counter at an 8-byte aligned address is accessed as std::atomic<uint64_t> (what C++20 calls
// std::atomic_ref); this is sound because std::atomic<uint64_t> is lock-free, has the size and
// alignment of uint64_t, and lock-free atomics are address-free (they work across processes that
// map the same memory, [atomics.lockfree]/5).
//
// Why native code at all: Python stores give no ordering guarantee. A reader that sees a new
// sequence number must also see the payload written before it; that needs a release store in the
// writer and an acquire load in the reader (ARM reorders plain stores; x86 only hides the bug).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace spreeze {

static_assert(std::atomic<uint64_t>::is_always_lock_free, "need lock-free 64-bit atomics for shared memory");
static_assert(sizeof(std::atomic<uint64_t>) == sizeof(uint64_t), "atomic<uint64_t> must be a plain 64-bit word");

inline std::atomic<uint64_t>* atomic_at(void* base, std::size_t offset) {
  return reinterpret_cast<std::atomic<uint64_t>*>(static_cast<char*>(base) + offset);
}

// ------------------------------------------------------------------------------------------------
// SPSC ring of fixed-size records. Counters are monotonically increasing record counts (never
// wrap in practice: 2^64 records); slot of record i is i % capacity.
//   writer: copy records into free slots, then write_seq.store(w + k, release)
//   reader: w = write_seq.load(acquire); read slots [r, w); then read_seq.store(r + k, release)
// The release/acquire pair on write_seq makes the payload visible before the count; the pair on
// read_seq keeps the writer from overwriting slots the reader is still copying.
// ------------------------------------------------------------------------------------------------
struct RingView {
  std::atomic<uint64_t>* write_seq;
  std::atomic<uint64_t>* read_seq;
  char* data;
  uint64_t capacity;      // records
  uint64_t record_bytes;  // bytes per record

  // Copy `n` records from `src` into slots starting at record number `seq` (handles the wrap).
  void copy_in(uint64_t seq, const char* src, uint64_t n) const {
    const uint64_t slot = seq % capacity;
    const uint64_t first = (slot + n <= capacity) ? n : capacity - slot;
    std::memcpy(data + slot * record_bytes, src, first * record_bytes);
    if (first < n) std::memcpy(data, src + first * record_bytes, (n - first) * record_bytes);
  }

  // Copy `n` records starting at record number `seq` out of the ring into `dst`.
  void copy_out(uint64_t seq, char* dst, uint64_t n) const {
    const uint64_t slot = seq % capacity;
    const uint64_t first = (slot + n <= capacity) ? n : capacity - slot;
    std::memcpy(dst, data + slot * record_bytes, first * record_bytes);
    if (first < n) std::memcpy(dst + first * record_bytes, data, (n - first) * record_bytes);
  }
};

// ------------------------------------------------------------------------------------------------
// Double-buffered seqlock for one writer and many readers (weight boards).
// Version v (1, 2, ...) lives in slot v % 2, whose sequence word reads 2v-1 while v is being
// written and 2v once it is complete; `latest` holds the newest complete version.
//   writer(v): seq[s].store(2v-1, relaxed); fence(release); copy; seq[s].store(2v, release);
//              latest.store(v, release)
//   reader:    v = latest.load(acquire); s1 = seq[v%2].load(acquire); need s1 == 2v; copy;
//              fence(acquire); s2 = seq[v%2].load(relaxed); accept iff s2 == s1
// The release fence after the odd mark keeps payload stores from moving before it; the acquire
// fence before the second load keeps payload loads from moving after it (the two fences a seqlock
// needs; on x86 they compile to nothing but still stop the compiler). A writer that dies mid-copy
// leaves the other slot, with the previous version, intact: readers keep working.
// ------------------------------------------------------------------------------------------------
struct SeqlockBoardView {
  std::atomic<uint64_t>* latest;
  std::atomic<uint64_t>* seq[2];
  char* slot[2];
  uint64_t nbytes;

  void publish(uint64_t version, const char* src) const {
    const int s = static_cast<int>(version & 1u);
    seq[s]->store(2 * version - 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    std::memcpy(slot[s], src, nbytes);
    seq[s]->store(2 * version, std::memory_order_release);
    latest->store(version, std::memory_order_release);
  }

  // One attempt: returns the version copied into dst, 0 if nothing was ever published, or
  // UINT64_MAX if the writer overwrote the slot during the copy (the caller retries).
  uint64_t try_read(char* dst) const {
    const uint64_t v = latest->load(std::memory_order_acquire);
    if (v == 0) return 0;
    const int s = static_cast<int>(v & 1u);
    const uint64_t s1 = seq[s]->load(std::memory_order_acquire);
    if (s1 != 2 * v) return UINT64_MAX;
    std::memcpy(dst, slot[s], nbytes);
    std::atomic_thread_fence(std::memory_order_acquire);
    const uint64_t s2 = seq[s]->load(std::memory_order_relaxed);
    return s2 == s1 ? v : UINT64_MAX;
  }
};

}  // namespace spreeze
