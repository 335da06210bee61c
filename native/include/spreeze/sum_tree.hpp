// K-ary sum tree over memory it is handed (a shared-memory segment or a plain buffer).
//
// Layout of the handed buffer (all offsets from the buffer start; the buffer must be 8-byte aligned):
//   [0, 256)            TreeHeader: magic, K, capacity, max priority, the writer lock (robust mutex)
//   [data_offset, ...)  float64 sum levels 0 (root) .. depth (leaves), then float64 min levels
//                       0 .. depth-1; every level starts on a 64-byte boundary.
// The children of node j of level L are nodes K*j .. K*j+K-1 of level L+1. For a complete tree this is
// the implicit heap rule "children of i at K*i+1 .. K*i+K" with the K-1 padding slots in front that
// align sibling groups; storing levels separately lets each level be only as wide as it needs
// (rounded up to K), so a capacity just above K^d does not cost K times the memory.
// A sibling group of K float64 is K/8 cache lines (K=8: exactly one), so a descent touches one
// group per level.
//
// The min levels hold, per inner node, the smallest *positive* leaf below it (+inf if none): the
// largest importance weight is (p_min / p_i)^beta, and zero-priority slots can never be drawn, so
// they must not count.
//
// Concurrency (the protocol is documented in spreeze_like/replay/sum_tree.py and docs/replay.md):
// every writer (update, set_max, rebuild) holds the process-shared *robust* mutex in the header, so
// a writer killed mid-batch leaves the lock recoverable (EOWNERDEAD): the next writer rebuilds every
// inner node from the leaves before going on. Samplers take no lock; they read with relaxed atomic
// loads, may see a total a batch behind, and clamp/retry so that they never return a slot outside
// the capacity or one whose leaf they read as zero.
#pragma once

#include <pthread.h>

#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace spreeze {

inline double load_relaxed(const double* p) {
  double v;
  __atomic_load(p, &v, __ATOMIC_RELAXED);
  return v;
}
inline void store_relaxed(double* p, double v) { __atomic_store(p, &v, __ATOMIC_RELAXED); }

constexpr std::uint64_t kTreeMagic = 0x31656572747a7073ULL;  // "spztree1", written last by init
constexpr std::uint32_t kTreeVersion = 1;
constexpr std::size_t kHeaderBytes = 256;
constexpr std::size_t kLineBytes = 64;
constexpr std::uint64_t kMaxCapacity = std::uint64_t{1} << 40;

struct TreeHeader {
  std::uint64_t magic;
  std::uint32_t version;
  std::uint32_t k;
  std::uint64_t capacity;
  std::uint64_t nbytes;
  std::uint64_t data_offset;
  double max_priority;           // priority new inserts get; only grows; written under the lock
  std::uint64_t batches_written;  // writer batches applied (statistics)
  std::uint64_t lock_recoveries;  // times a writer found the lock held by a dead process
  pthread_mutex_t lock;           // process-shared, robust
};
static_assert(sizeof(TreeHeader) <= kHeaderBytes, "tree header outgrew its reserved space");

// Where every level lives; a pure function of (capacity, K), so every process computes the same.
struct TreeLayout {
  std::uint64_t capacity = 0;
  std::uint32_t k = 0;
  std::uint32_t depth = 0;            // leaves are level `depth`, the root is level 0
  std::vector<std::uint64_t> real;    // nodes of each level that cover at least one slot
  std::vector<std::uint64_t> width;   // real rounded up to K (root: 1)
  std::vector<std::uint64_t> sum_off;  // offset in doubles from the data start
  std::vector<std::uint64_t> min_off;  // levels 0 .. depth-1
  std::uint64_t data_doubles = 0;
  std::uint64_t nbytes = 0;  // header + alignment slack + data: what the caller must hand over
};

inline std::uint64_t round_up(std::uint64_t x, std::uint64_t m) { return (x + m - 1) / m * m; }

inline TreeLayout make_layout(std::uint64_t capacity, std::uint32_t k) {
  if (capacity == 0 || capacity > kMaxCapacity) {
    throw std::invalid_argument("sum tree capacity must be in [1, 2^40], got " + std::to_string(capacity));
  }
  if (k < 2 || (k & (k - 1)) != 0) {
    throw std::invalid_argument("sum tree K must be a power of two >= 2, got " + std::to_string(k));
  }
  TreeLayout t;
  t.capacity = capacity;
  t.k = k;
  std::vector<std::uint64_t> real_up{capacity};  // leaves first, then upwards
  while (real_up.back() > 1 || real_up.size() == 1) real_up.push_back((real_up.back() + k - 1) / k);
  t.depth = static_cast<std::uint32_t>(real_up.size() - 1);
  t.real.assign(real_up.rbegin(), real_up.rend());
  const std::uint64_t per_line = kLineBytes / sizeof(double);
  std::uint64_t off = 0;
  for (std::uint32_t level = 0; level <= t.depth; ++level) {
    t.width.push_back(level == 0 ? 1 : round_up(t.real[level], k));
    t.sum_off.push_back(off);
    off += round_up(t.width[level], per_line);
  }
  for (std::uint32_t level = 0; level < t.depth; ++level) {
    t.min_off.push_back(off);
    off += round_up(t.width[level], per_line);
  }
  t.data_doubles = off;
  t.nbytes = kHeaderBytes + kLineBytes + off * sizeof(double);
  return t;
}

// Offset of the 64-byte aligned data region for a buffer at `addr`. Shared-memory mappings are
// page aligned, so every process mapping the same segment computes the same offset.
inline std::uint64_t data_offset_for(const void* addr) {
  auto a = reinterpret_cast<std::uintptr_t>(addr) + kHeaderBytes;
  return kHeaderBytes + (kLineBytes - a % kLineBytes) % kLineBytes;
}

// out[i] = x[i]^a, for the priorities (|td| + eps)^alpha: a learner sends thousands of TD errors
// per update and std::pow (~15-20 ns each here) took longer than the whole tree update. Eight lanes
// at a time with GCC/Clang vector extensions (SSE2 on x86-64, NEON on aarch64; no -march needed):
// log2 from the exponent bits plus an atanh series on the mantissa, exp2 from a Taylor series on
// the fraction plus the exponent bits; within ~1e-14 relative of std::pow. Lanes outside
// [2^-1000, 2^1000] (zero, subnormal, huge), and exponents outside (0, 1), go to std::pow.
#pragma GCC diagnostic push
// The vectors never cross a call boundary (always inlined), so their ABI does not matter.
#pragma GCC diagnostic ignored "-Wpsabi"
using V8d = double __attribute__((vector_size(64)));
using V8u = std::uint64_t __attribute__((vector_size(64)));

__attribute__((always_inline)) inline V8d pow8(V8d x, double a) {
  V8u bits;
  std::memcpy(&bits, &x, sizeof bits);
  // Exponent as a double without an int->double conversion (none in SSE2): 2^52 + field, exact.
  const V8u field = ((bits >> 52) & 0x7FFULL) | 0x4330000000000000ULL;
  V8d e;
  std::memcpy(&e, &field, sizeof e);
  e -= 4503599627370496.0 + 1023.0;
  const V8u mant = (bits & 0x000FFFFFFFFFFFFFULL) | 0x3FF0000000000000ULL;
  V8d m;
  std::memcpy(&m, &mant, sizeof m);  // x = m * 2^e, m in [1, 2)
  const auto big = m > 1.4142135623730951;  // centre m on 1 so that |s| <= 0.1716 below
  m = big ? m * 0.5 : m;
  e = big ? e + 1.0 : e;
  const V8d s = (m - 1.0) / (m + 1.0);  // ln m = 2 atanh(s) = 2 (s + s^3/3 + s^5/5 + ...)
  // Estrin's scheme rather than Horner's: the partial sums are independent, so the chain of
  // dependent operations is about half as long and more lanes are in flight at once.
  const V8d t = s * s;
  const V8d t2 = t * t;
  const V8d t4 = t2 * t2;
  const V8d p = ((1.0 + t * (1.0 / 3)) + t2 * (1.0 / 5 + t * (1.0 / 7))) +
                t4 * ((1.0 / 9 + t * (1.0 / 11)) + t2 * (1.0 / 13 + t * (1.0 / 15)));  // to s^15 / 15
  const V8d y = a * (e + 2.8853900817779268 * s * p);  // a * log2(x); 2.885... = 2 / ln 2
  const V8d n = (y + 6755399441055744.0) - 6755399441055744.0;  // round to nearest (|y| < 2^51)
  const V8d g = (y - n) * 0.6931471805599453;                   // 2^(y-n) = e^g, |g| <= 0.347
  const V8d g2 = g * g;
  const V8d g4 = g2 * g2;
  const V8d q = ((1.0 + g) + g2 * (1.0 / 2 + g * (1.0 / 6))) +
                g4 * ((1.0 / 24 + g * (1.0 / 120)) + g2 * (1.0 / 720 + g * (1.0 / 5040))) +
                (g4 * g4) * ((1.0 / 40320 + g * (1.0 / 362880)) + g2 * (1.0 / 3628800 + g * (1.0 / 39916800)));
  const V8d biased = n + (6755399441055744.0 + 1023.0);  // low bits: n + 1023 as an integer
  V8u scale_bits;
  std::memcpy(&scale_bits, &biased, sizeof scale_bits);
  scale_bits <<= 52;
  V8d scale;
  std::memcpy(&scale, &scale_bits, sizeof scale);
  return q * scale;
}
#pragma GCC diagnostic pop

// out may alias x.
inline void priority_pow(const double* x, double a, double* out, std::size_t n) {
  std::size_t i = 0;
  if (a > 0.0 && a < 1.0 && a != 0.5) {
    for (; i + 8 <= n; i += 8) {
      double in[8], res[8];
      std::memcpy(in, x + i, sizeof in);
      V8d v;
      std::memcpy(&v, in, sizeof v);
      v = pow8(v, a);
      std::memcpy(res, &v, sizeof res);
      for (int k = 0; k < 8; ++k) {
        if (!(in[k] >= 0x1p-1000 && in[k] <= 0x1p1000)) res[k] = std::pow(in[k], a);
      }
      std::memcpy(out + i, res, sizeof res);
    }
  }
  for (; i < n; ++i) out[i] = a == 1.0 ? x[i] : (a == 0.5 ? std::sqrt(x[i]) : std::pow(x[i], a));
}

// splitmix64: a small, fast generator with good statistics; one independent stream per call.
struct SplitMix64 {
  std::uint64_t s;
  std::uint64_t next() {
    std::uint64_t z = (s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
};

}  // namespace spreeze

namespace spreeze {

// The tree proper. K is a compile-time power of two so that parent/child index maths are shifts and
// the per-level child scan is a fixed-length loop the compiler unrolls.
template <int K>
class KaryTree {
  static_assert(K >= 4 && (K & (K - 1)) == 0, "K must be a power of two >= 4");

 public:
  // Lays the tree over [base, base + nbytes). create=true initialises it (all priorities zero);
  // create=false attaches to a tree another process initialised and checks that it matches.
  KaryTree(void* base, std::size_t nbytes, std::uint64_t capacity, bool create, std::uint64_t seed);
  KaryTree(const KaryTree&) = delete;
  KaryTree& operator=(const KaryTree&) = delete;

  const TreeLayout& layout() const { return layout_; }
  std::uint64_t capacity() const { return layout_.capacity; }

  // --- writers: each call holds the tree's robust writer lock for the whole batch -------------
  // Sets leaves, then recomputes each touched ancestor once from its children (lazy writing).
  // With `expected`/`gens`, entry i is applied only if gens[slot] == expected[i] (read under the
  // lock), so an update for a slot rewritten since it was sampled is dropped. Returns #applied.
  std::size_t update(const std::int64_t* slots, const double* priorities, std::size_t n,
                     const std::uint64_t* expected, const std::uint64_t* gens);
  // As update, with priorities (|td| + eps)^alpha computed here.
  std::size_t update_td(const std::int64_t* slots, const double* td, std::size_t n, double alpha, double eps,
                        const std::uint64_t* expected, const std::uint64_t* gens);
  // Sets each slot's priority to the largest priority seen so far (what new transitions get).
  void set_max(const std::int64_t* slots, std::size_t n);
  // Raises the largest priority (what set_max writes) to at least `priority` without touching a leaf:
  // a resume restores the saved run's, which may exceed every loaded row's. It only grows, as always.
  void raise_max(double priority);
  // Recomputes every inner node from the leaves.
  void rebuild();

  // --- readers: no lock; see the header comment for what a concurrent reader may see ----------
  double total() const { return load_relaxed(sums(0)); }
  double min_positive() const { return load_relaxed(mins(0)); }
  double max_priority() const { return load_relaxed(&hdr_->max_priority); }
  std::uint64_t lock_recoveries() const { return __atomic_load_n(&hdr_->lock_recoveries, __ATOMIC_RELAXED); }
  void get(const std::int64_t* slots, std::size_t n, double* out) const;
  // Slot whose cumulative-priority interval contains prefix[i] (prefix clamped into [0, total)).
  void find(const double* prefix, std::size_t n, std::int64_t* out) const;
  // Stratified proportional sampling: sample i falls in the i-th of n equal slices of the total.
  // probs[i] = p(slot)/total; if weights, weights[i] = (p_min / p(slot))^beta <= 1.
  void sample(std::size_t n, std::int64_t* slots, double* probs, float* weights, double beta);
  // Test hook: take the lock, write one leaf without recomputing its ancestors (a batch cut short)
  // and _exit while still holding the lock, as a writer killed mid-batch would.
  [[noreturn]] void die_mid_batch_for_tests(std::int64_t slot, double value);
  void seed(std::uint64_t s) {
    seed_ = s;
    __atomic_store_n(&calls_, 0, __ATOMIC_RELAXED);
  }

  const double* sums(std::uint32_t level) const { return data_ + layout_.sum_off[level]; }
  const double* mins(std::uint32_t level) const { return data_ + layout_.min_off[level]; }

 private:
  double* sums(std::uint32_t level) { return data_ + layout_.sum_off[level]; }
  double* mins(std::uint32_t level) { return data_ + layout_.min_off[level]; }
  void lock();
  void unlock() { pthread_mutex_unlock(&hdr_->lock); }
  void check_slots(const std::int64_t* slots, std::size_t n) const;
  std::size_t write_locked(const std::int64_t* slots, const double* priorities, std::size_t n,
                           const std::uint64_t* expected, const std::uint64_t* gens);
  // Recomputes nodes[0..m) of `level` (or all of 0..m when dense) from their children.
  void recompute_level(std::uint32_t level, const std::uint64_t* nodes, std::size_t m, bool dense);
  void rebuild_locked();
  // Level-synchronous descent of a whole batch; nodes[i] = -1 marks a descent that met an
  // all-zero group (only possible while a writer is mid-batch).
  void descend(std::size_t n, std::int64_t* nodes, double* us) const;
  std::int64_t descend_one(double u) const;

  TreeLayout layout_;
  TreeHeader* hdr_;
  double* data_;
  std::uint64_t seed_;
  std::uint64_t calls_ = 0;
  // Writer scratch, only touched under the lock: the touched nodes of the current level and a
  // bitmap that keeps each ancestor in the list once.
  std::vector<std::uint64_t> cur_, next_, mark_;
};

}  // namespace spreeze
