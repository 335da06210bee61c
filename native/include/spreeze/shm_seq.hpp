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
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <ctime>

#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace spreeze {

static_assert(std::atomic<uint64_t>::is_always_lock_free, "need lock-free 64-bit atomics for shared memory");
static_assert(sizeof(std::atomic<uint64_t>) == sizeof(uint64_t), "atomic<uint64_t> must be a plain 64-bit word");

inline std::atomic<uint64_t>* atomic_at(void* base, std::size_t offset) {
  return reinterpret_cast<std::atomic<uint64_t>*>(static_cast<char*>(base) + offset);
}

inline std::atomic<uint32_t>* atomic32_at(void* base, std::size_t offset) {
  return reinterpret_cast<std::atomic<uint32_t>*>(static_cast<char*>(base) + offset);
}

// ------------------------------------------------------------------------------------------------
// Doorbell: lets one side sleep in the kernel until the other side publishes, instead of polling
// (an eventcount over a futex in the shared segment; no FUTEX_PRIVATE_FLAG, so it works across
// processes). One sleeper per doorbell (SPSC).
//   notifier, after publishing its counter: fence(seq_cst); if (exchange(waiting, 0)) { ++bell; futex_wake }
//   sleeper (after a short spin): b = bell; waiting = 1; fence(seq_cst); if (!ready()) futex_wait(bell, b)
// The two seq_cst fences order "publish, then look at waiting" against "announce waiting, then
// look at the counter": at least one side sees the other, so a wake-up is never lost (and the
// sleeper's timeout bounds the damage of any bug). Without Linux futexes the sleeper naps 50 us.
// ------------------------------------------------------------------------------------------------
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

struct Doorbell {
  static constexpr int kSpinMicros = 20;
  std::atomic<uint32_t>* bell;
  std::atomic<uint32_t>* waiting;

  void notify() const {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    // The exchange clears the flag, so one sleep costs one wake-up syscall, not one per publish
    // until the sleeper gets scheduled again; a sleeper that must sleep again re-arms it.
    if (waiting->load(std::memory_order_relaxed) != 0 && waiting->exchange(0, std::memory_order_acq_rel) != 0) {
      bell->fetch_add(1, std::memory_order_release);
#ifdef __linux__
      syscall(SYS_futex, reinterpret_cast<uint32_t*>(bell), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
#endif
    }
  }

  // Sleep until ready() holds or timeout_s passes; returns ready() at the end.
  template <class Ready>
  bool wait(Ready ready, double timeout_s) const {
    using clock = std::chrono::steady_clock;
    const auto deadline = clock::now() + std::chrono::duration_cast<clock::duration>(
                                             std::chrono::duration<double>(timeout_s > 0 ? timeout_s : 0));
    // Spin a little first: a producer writing one record at a time publishes every few hundred
    // ns, and a sleep/wake pair per record would cost microseconds each.
    const auto spin_until = clock::now() + std::chrono::microseconds(kSpinMicros);
    for (int i = 1;; ++i) {
      if (ready()) return true;
      if (i % 64 == 0 && clock::now() >= spin_until) break;
      cpu_relax();
    }
    for (;;) {
      if (ready()) return true;
      const uint32_t b = bell->load(std::memory_order_acquire);
      waiting->store(1, std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_seq_cst);
      if (ready()) {
        waiting->store(0, std::memory_order_relaxed);
        return true;
      }
      const auto left = deadline - clock::now();
      if (left <= clock::duration::zero()) {
        waiting->store(0, std::memory_order_relaxed);
        return ready();
      }
      const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
#ifdef __linux__
      timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
      syscall(SYS_futex, reinterpret_cast<uint32_t*>(bell), FUTEX_WAIT, b, &ts, nullptr, 0);
#else
      timespec ts{0, static_cast<long>(ns < 50000 ? ns : 50000)};
      nanosleep(&ts, nullptr);
#endif
      waiting->store(0, std::memory_order_relaxed);
    }
  }
};

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
  // n <= capacity: the caller derives n from counters and must have checked them (RingCore's
  // checked_fill), since counters live in shared memory that any same-user process can overwrite.
  void copy_in(uint64_t seq, const char* src, uint64_t n) const {
    const uint64_t slot = seq % capacity;
    const uint64_t first = (slot + n <= capacity) ? n : capacity - slot;
    std::memcpy(data + slot * record_bytes, src, first * record_bytes);
    if (first < n) std::memcpy(data, src + first * record_bytes, (n - first) * record_bytes);
  }

  // Copy `n` records starting at record number `seq` out of the ring into `dst` (n <= capacity).
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
