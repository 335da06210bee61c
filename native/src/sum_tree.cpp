// K-ary sum tree: the implementation of KaryTree<K> (declared in spreeze/sum_tree.hpp) for
// K = 4, 8, 16, 32. The Python bindings live in sum_tree_bindings.cpp.
#include "spreeze/sum_tree.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <unistd.h>

namespace spreeze {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Writer-side group reductions use plain loads: only the lock holder writes these nodes, so its
// reads race with nothing, and plain loads let the compiler vectorise the K-wide reductions.
template <int K>
inline double group_sum(const double* c) {
  // Four independent accumulators: the adds do not wait on each other, and the order is fixed,
  // so every recomputation of a node gives the same bits.
  double a0 = 0, a1 = 0, a2 = 0, a3 = 0;
  for (int k = 0; k < K; k += 4) {
    a0 += c[k];
    a1 += c[k + 1];
    a2 += c[k + 2];
    a3 += c[k + 3];
  }
  return (a0 + a1) + (a2 + a3);
}

template <int K>
inline double group_min(const double* c) {
  double m = kInf;
  for (int k = 0; k < K; ++k) m = c[k] < m ? c[k] : m;
  return m;
}

template <int K>
inline double group_min_positive(const double* leaves) {
  double m = kInf;
  for (int k = 0; k < K; ++k) {
    const double v = leaves[k] > 0 ? leaves[k] : kInf;  // select, not branch: leaves are random
    m = v < m ? v : m;
  }
  return m;
}

template <int K>
inline void prefetch_group(const double* g) {
  for (int line = 0; line < K / 8 || line == 0; ++line) __builtin_prefetch(g + 8 * line, 0, 3);
}

std::string bad_priority(std::size_t i, double v, const char* what) {
  const char* kind = std::isnan(v) ? "NaN" : (std::isinf(v) ? "infinite" : "negative");
  return std::string(what) + " at position " + std::to_string(i) + " is " + kind + " (" + std::to_string(v) +
         "); priorities must be finite and >= 0 (a NaN/inf TD error usually means training diverged)";
}

}  // namespace

template <int K>
KaryTree<K>::KaryTree(void* base, std::size_t nbytes, std::uint64_t capacity, bool create, std::uint64_t seed)
    : layout_(make_layout(capacity, K)), seed_(seed) {
  if (reinterpret_cast<std::uintptr_t>(base) % 8 != 0) {
    throw std::invalid_argument("sum tree buffer must be 8-byte aligned");
  }
  if (nbytes < layout_.nbytes) {
    throw std::invalid_argument("sum tree buffer too small: capacity " + std::to_string(capacity) + " with K=" +
                                std::to_string(K) + " needs " + std::to_string(layout_.nbytes) + " bytes, got " +
                                std::to_string(nbytes) + " (size it with SumTree.nbytes)");
  }
  hdr_ = static_cast<TreeHeader*>(base);
  const std::uint64_t off = data_offset_for(base);
  data_ = reinterpret_cast<double*>(static_cast<char*>(base) + off);
  if (create) {
    std::memset(base, 0, kHeaderBytes);
    for (std::uint32_t level = 0; level <= layout_.depth; ++level) {
      std::fill(sums(level), sums(level) + layout_.width[level], 0.0);
    }
    for (std::uint32_t level = 0; level < layout_.depth; ++level) {
      std::fill(mins(level), mins(level) + layout_.width[level], kInf);
    }
    hdr_->version = kTreeVersion;
    hdr_->k = K;
    hdr_->capacity = capacity;
    hdr_->nbytes = layout_.nbytes;
    hdr_->data_offset = off;
    hdr_->max_priority = 1.0;
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
    // Robust: if a writer dies holding the lock, the next locker gets EOWNERDEAD instead of
    // blocking forever, and repairs the tree (lock()).
    pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
    const int rc = pthread_mutex_init(&hdr_->lock, &attr);
    pthread_mutexattr_destroy(&attr);
    if (rc != 0) throw std::runtime_error("could not initialise the sum tree lock: " + std::string(strerror(rc)));
    __atomic_store_n(&hdr_->magic, kTreeMagic, __ATOMIC_RELEASE);  // attachers may look only now
  } else {
    if (__atomic_load_n(&hdr_->magic, __ATOMIC_ACQUIRE) != kTreeMagic || hdr_->version != kTreeVersion) {
      throw std::invalid_argument("buffer does not hold an initialised sum tree; create it with create=True first");
    }
    if (hdr_->k != static_cast<std::uint32_t>(K) || hdr_->capacity != capacity) {
      throw std::invalid_argument("sum tree in the buffer has K=" + std::to_string(hdr_->k) + ", capacity " +
                                  std::to_string(hdr_->capacity) + "; attach with the same K and capacity");
    }
    if (hdr_->data_offset != off) {
      throw std::invalid_argument("sum tree buffer is mapped at a different alignment than when it was created");
    }
  }
  const std::uint32_t lp = layout_.depth - 1;  // widest inner level: the parents of the leaves
  mark_.assign(layout_.width[lp] / 64 + 1, 0);
}

template <int K>
void KaryTree<K>::lock() {
  const int rc = pthread_mutex_lock(&hdr_->lock);
  if (rc == 0) return;
  if (rc == EOWNERDEAD) {
    // The previous writer died mid-batch: its leaves may be partly written and its ancestors not
    // yet recomputed. Leaves are each valid on their own, so recomputing every inner node from
    // them restores a consistent tree before anyone writes on top of it.
    rebuild_locked();
    __atomic_fetch_add(&hdr_->lock_recoveries, 1, __ATOMIC_RELAXED);
    pthread_mutex_consistent(&hdr_->lock);
    return;
  }
  throw std::runtime_error("sum tree writer lock failed: " + std::string(strerror(rc)) +
                           "; the replay segment is unusable, start a new run");
}

template <int K>
void KaryTree<K>::check_slots(const std::int64_t* slots, std::size_t n) const {
  const auto cap = static_cast<std::int64_t>(layout_.capacity);
  for (std::size_t i = 0; i < n; ++i) {
    if (slots[i] < 0 || slots[i] >= cap) {
      throw std::invalid_argument("slot " + std::to_string(slots[i]) + " at position " + std::to_string(i) +
                                  " is outside the tree's capacity [0, " + std::to_string(cap) + ")");
    }
  }
}

template <int K>
void KaryTree<K>::recompute_level(std::uint32_t level, const std::uint64_t* nodes, std::size_t m, bool dense) {
  constexpr std::size_t kAhead = 8;
  double* dst_sum = sums(level);
  double* dst_min = mins(level);
  const double* c_sum = sums(level + 1);
  const bool above_leaves = level + 1 == layout_.depth;
  const double* c_min = above_leaves ? nullptr : mins(level + 1);
  for (std::size_t idx = 0; idx < m; ++idx) {
    const std::uint64_t j = dense ? idx : nodes[idx];
    if (!dense && idx + kAhead < m) {
      // Everything the recompute kAhead nodes on touches: without this each one waits on up to
      // four cache misses in turn (inner levels are far larger than L1).
      const std::uint64_t ja = nodes[idx + kAhead];
      prefetch_group<K>(c_sum + K * ja);
      if (c_min) prefetch_group<K>(c_min + K * ja);
      __builtin_prefetch(dst_sum + ja, 1, 3);
      __builtin_prefetch(dst_min + ja, 1, 3);
    }
    const double* c = c_sum + K * j;
    store_relaxed(dst_sum + j, group_sum<K>(c));
    store_relaxed(dst_min + j, above_leaves ? group_min_positive<K>(c) : group_min<K>(c_min + K * j));
  }
}

template <int K>
void KaryTree<K>::rebuild_locked() {
  for (std::uint32_t level = layout_.depth; level-- > 0;) {
    recompute_level(level, nullptr, layout_.real[level], true);
  }
}

template <int K>
void KaryTree<K>::rebuild() {
  lock();
  rebuild_locked();
  unlock();
}

template <int K>
std::size_t KaryTree<K>::write_locked(const std::int64_t* slots, const double* pr, std::size_t n,
                                      const std::uint64_t* expected, const std::uint64_t* gens) {
  constexpr std::size_t kAhead = 16;  // leaves (and generations) are random: fetch them early
  double* leaves = sums(layout_.depth);
  double mx = hdr_->max_priority;
  std::size_t applied = 0;
  cur_.clear();
  for (std::size_t i = 0; i < n; ++i) {
    if (i + kAhead < n) {
      __builtin_prefetch(leaves + slots[i + kAhead], 1, 3);
      if (gens) __builtin_prefetch(gens + slots[i + kAhead], 0, 3);
    }
    const auto s = static_cast<std::uint64_t>(slots[i]);
    // Read under the lock: the inserter bumps a slot's generation before it takes the lock to
    // set the new transition's priority, so a stale update either sees the bump or is
    // overwritten by that later set_max.
    if (gens && __atomic_load_n(gens + s, __ATOMIC_ACQUIRE) != expected[i]) continue;
    store_relaxed(leaves + s, pr[i]);
    mx = std::max(mx, pr[i]);
    ++applied;
    const std::uint64_t p = s / K;
    std::uint64_t& word = mark_[p >> 6];
    const std::uint64_t bit = std::uint64_t{1} << (p & 63);
    if (!(word & bit)) {
      word |= bit;
      cur_.push_back(p);
    }
  }
  for (std::uint64_t p : cur_) mark_[p >> 6] = 0;
  // Lazy writing: each touched ancestor is recomputed once per batch from its children, level by
  // level, so a batch costs one pass up the tree and sums never accumulate rounding drift.
  for (std::uint32_t level = layout_.depth - 1;; --level) {
    recompute_level(level, cur_.data(), cur_.size(), false);
    if (level == 0) break;
    next_.clear();
    for (std::uint64_t j : cur_) {
      const std::uint64_t p = j / K;
      std::uint64_t& word = mark_[p >> 6];
      const std::uint64_t bit = std::uint64_t{1} << (p & 63);
      if (!(word & bit)) {
        word |= bit;
        next_.push_back(p);
      }
    }
    for (std::uint64_t p : next_) mark_[p >> 6] = 0;
    cur_.swap(next_);
  }
  __atomic_store(&hdr_->max_priority, &mx, __ATOMIC_RELAXED);
  ++hdr_->batches_written;
  return applied;
}

template <int K>
std::size_t KaryTree<K>::update(const std::int64_t* slots, const double* pr, std::size_t n,
                                const std::uint64_t* expected, const std::uint64_t* gens) {
  // Everything is checked before the first write: bad input never leaves a half-applied batch.
  check_slots(slots, n);
  for (std::size_t i = 0; i < n; ++i) {
    if (!(pr[i] >= 0) || !std::isfinite(pr[i])) throw std::invalid_argument(bad_priority(i, pr[i], "priority"));
  }
  lock();
  try {
    const std::size_t applied = write_locked(slots, pr, n, expected, gens);
    unlock();
    return applied;
  } catch (...) {
    unlock();
    throw;
  }
}

template <int K>
std::size_t KaryTree<K>::update_td(const std::int64_t* slots, const double* td, std::size_t n, double alpha,
                                   double eps, const std::uint64_t* expected, const std::uint64_t* gens) {
  if (!(alpha >= 0) || !std::isfinite(alpha) || !(eps >= 0) || !std::isfinite(eps)) {
    throw std::invalid_argument("alpha and eps must be finite and >= 0");
  }
  std::vector<double> pr(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (!std::isfinite(td[i])) throw std::invalid_argument(bad_priority(i, td[i], "TD error"));
    pr[i] = std::fabs(td[i]) + eps;
  }
  priority_pow(pr.data(), alpha, pr.data(), n);
  return update(slots, pr.data(), n, expected, gens);
}

template <int K>
void KaryTree<K>::set_max(const std::int64_t* slots, std::size_t n) {
  check_slots(slots, n);
  lock();
  try {
    std::vector<double> pr(n, hdr_->max_priority);
    write_locked(slots, pr.data(), n, nullptr, nullptr);
  } catch (...) {
    unlock();
    throw;
  }
  unlock();
}

template <int K>
void KaryTree<K>::raise_max(double priority) {
  if (!(priority > 0.0) || !std::isfinite(priority)) {
    throw std::invalid_argument("the largest priority must be positive and finite");
  }
  lock();
  if (priority > hdr_->max_priority) __atomic_store(&hdr_->max_priority, &priority, __ATOMIC_RELAXED);
  unlock();
}

template <int K>
void KaryTree<K>::get(const std::int64_t* slots, std::size_t n, double* out) const {
  check_slots(slots, n);
  const double* leaves = sums(layout_.depth);
  for (std::size_t i = 0; i < n; ++i) out[i] = load_relaxed(leaves + slots[i]);
}

template <int K>
void KaryTree<K>::descend(std::size_t n, std::int64_t* nodes, double* us) const {
  for (std::uint32_t level = 0; level < layout_.depth; ++level) {
    const double* child = sums(level + 1);
    const double* grand = level + 2 <= layout_.depth ? sums(level + 2) : nullptr;
    for (std::size_t i = 0; i < n; ++i) {
      const std::int64_t j = nodes[i];
      if (j < 0) continue;
      double u = us[i];
      const double* c = child + K * j;
      // Branchless scan: pick = how many running sums are <= u, i.e. the first child whose
      // interval contains u. A zero child never owns an interval, so it is never picked. The
      // branch-free form lets the CPU overlap the scans of many samples instead of stalling on a
      // mispredicted exit at every level.
      double acc = 0, below = 0;
      int pick = 0;
      for (int k = 0; k < K; ++k) {
        const double v = load_relaxed(c + k);
        acc += v;
        const bool past = acc <= u;
        pick += past;
        below = past ? acc : below;
      }
      if (pick < K) {
        u -= below;
      } else {
        // u ran past the group: rounding, or a parent read before a writer lowered its
        // children. Take the last positive child; an all-zero group fails this descent.
        int last = -1;
        for (int k = 0; k < K; ++k) last = load_relaxed(c + k) > 0 ? k : last;
        if (last < 0) {
          nodes[i] = -1;
          continue;
        }
        pick = last;
        u = std::nextafter(load_relaxed(c + last), 0.0);
      }
      const std::int64_t chosen = K * j + pick;
      nodes[i] = chosen;
      us[i] = u;
      // Batch-wide descent: the next level's group of this sample is fetched now and used only
      // after the other n-1 samples of this level, so its memory latency is hidden.
      if (grand) prefetch_group<K>(grand + K * chosen);
    }
  }
}

template <int K>
std::int64_t KaryTree<K>::descend_one(double u) const {
  std::int64_t node = 0;
  descend(1, &node, &u);
  return node;
}

template <int K>
void KaryTree<K>::find(const double* prefix, std::size_t n, std::int64_t* out) const {
  const double total = this->total();
  if (!(total > 0)) throw std::invalid_argument("cannot search an empty sum tree (every priority is zero)");
  std::vector<double> us(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (!std::isfinite(prefix[i])) throw std::invalid_argument("prefix sums must be finite");
    us[i] = std::min(std::max(prefix[i], 0.0), std::nextafter(total, 0.0));
    out[i] = 0;
  }
  descend(n, out, us.data());
}

template <int K>
void KaryTree<K>::sample(std::size_t n, std::int64_t* slots, double* probs, float* weights, double beta) {
  const double total = this->total();
  if (!(total > 0)) {
    throw std::invalid_argument("cannot sample: every priority in the tree is zero (insert transitions first)");
  }
  if (n == 0) return;
  SplitMix64 rng{seed_ ^ (0xD1B54A32D192ED03ULL * (__atomic_fetch_add(&calls_, 1, __ATOMIC_RELAXED) + 1))};
  const double slice = total / static_cast<double>(n);
  const double below_total = std::nextafter(total, 0.0);
  for (std::size_t i = 0; i < n; ++i) {  // the outputs double as the descent's scratch
    probs[i] = std::min((static_cast<double>(i) + rng.uniform()) * slice, below_total);
    slots[i] = 0;
  }
  descend(n, slots, probs);
  const double* leaves = sums(layout_.depth);
  const auto cap = static_cast<std::int64_t>(layout_.capacity);
  double p_min = min_positive();
  for (std::size_t i = 0; i < n; ++i) {
    double p = slots[i] >= 0 && slots[i] < cap ? load_relaxed(leaves + slots[i]) : 0.0;
    // A failed descent or a leaf zeroed since the descent read it: draw again, first inside the
    // same stratum, then anywhere. Only a writer racing this sampler gets here.
    for (int attempt = 0; !(p > 0); ++attempt) {
      if (attempt == 64) {
        throw std::runtime_error("could not draw a positive-priority slot in 64 attempts; is a writer zeroing the tree?");
      }
      const double t = this->total();
      if (!(t > 0)) throw std::invalid_argument("cannot sample: every priority in the tree is zero");
      const double r = rng.uniform();
      const double u = attempt < 8 ? (static_cast<double>(i) + r) * (t / static_cast<double>(n)) : r * t;
      slots[i] = descend_one(std::min(u, std::nextafter(t, 0.0)));
      p = slots[i] >= 0 && slots[i] < cap ? load_relaxed(leaves + slots[i]) : 0.0;
    }
    probs[i] = p / total;
    p_min = std::min(p_min, p);  // a concurrent writer may have put a leaf below the min we read
  }
  if (weights) {
    // (N P(i))^-beta / max_j (N P(j))^-beta == (p_min / p_i)^beta: N and the total cancel.
    const double pm_total = p_min / total;
    for (std::size_t i = 0; i < n; ++i) {
      weights[i] = beta == 0 ? 1.0f : std::pow(static_cast<float>(pm_total / probs[i]), static_cast<float>(beta));
    }
  }
}

template <int K>
void KaryTree<K>::die_mid_batch_for_tests(std::int64_t slot, double value) {
  check_slots(&slot, 1);
  lock();
  store_relaxed(sums(layout_.depth) + slot, value);
  _exit(3);
}

template class KaryTree<4>;
template class KaryTree<8>;
template class KaryTree<16>;
template class KaryTree<32>;

}  // namespace spreeze
