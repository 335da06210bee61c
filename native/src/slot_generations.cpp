// Per-slot write generations of the replay storage (a seqlock per slot), and the few atomic
// operations on 64-bit header words that the storage needs in shared memory.
//
// Writer (the one inserting process), per chunk of slots:
//   begin_write: gen -> odd (relaxed store), then a release fence: the odd value is visible no later
//                than any byte of the new row;
//   ... write the rows ...;
//   end_write:   gen -> next even value (release store): the row is visible before the new value.
// Reader: read gens (acquire) -> copy the rows -> torn(): acquire fence, re-read gens. A row is
// intact iff its first read was even and the re-read is equal. These orderings are what numpy's
// plain loads and stores cannot promise on weakly ordered CPUs (aarch64), hence native code.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace py = pybind11;

namespace spreeze {

namespace {

using I64 = py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>;

// Atomics need naturally aligned words: a misaligned 8-byte atomic is not atomic across a cache
// line on x86 (a split lock) and faults on aarch64. numpy views at odd offsets are easy to make.
void check_aligned(const void* p, const char* name) {
  if (reinterpret_cast<std::uintptr_t>(p) % alignof(std::uint64_t) != 0) {
    throw py::value_error(std::string(name) + " must be 8-byte aligned for atomic access; got a view at address " +
                          std::to_string(reinterpret_cast<std::uintptr_t>(p)) + " (view the buffer at an offset "
                          "that is a multiple of 8)");
  }
}

std::uint64_t* live_u64(const py::handle& obj, const char* name) {
  if (!py::isinstance<py::array>(obj)) throw py::type_error(std::string(name) + " must be a numpy uint64 array");
  auto a = py::reinterpret_borrow<py::array>(obj);
  if (!a.dtype().is(py::dtype::of<std::uint64_t>()) || a.ndim() != 1 || !(a.flags() & py::array::c_style) ||
      !a.writeable()) {
    throw py::type_error(std::string(name) + " must be a writable 1-D C-contiguous numpy uint64 array");
  }
  check_aligned(a.data(), name);
  return static_cast<std::uint64_t*>(a.mutable_data());
}

// Bytes of one row (everything after the first axis) of a C-contiguous array, from its shape. Not
// strides[0]: numpy calls an array C-contiguous whatever the stride of a length-1 axis, or of any
// axis of an empty array, so strides[0] can be anything there (a[::5][:1] keeps 5 rows' stride).
std::size_t row_bytes_of(const py::array& a) {
  std::size_t bytes = static_cast<std::size_t>(a.itemsize());
  for (py::ssize_t d = 1; d < a.ndim(); ++d) {
    if (__builtin_mul_overflow(bytes, static_cast<std::size_t>(a.shape(d)), &bytes)) {
      throw py::value_error("a column's row size overflows");
    }
  }
  return bytes;
}

I64 checked_slots(const py::handle& obj, py::ssize_t len) {
  py::array raw = py::array::ensure(obj);
  if (!raw || (raw.dtype().kind() != 'i' && raw.dtype().kind() != 'u') || raw.ndim() != 1) {
    throw py::type_error("slots must be a 1-D integer array");
  }
  I64 s = I64::ensure(raw);
  const std::int64_t* p = s.data();
  for (py::ssize_t i = 0; i < s.shape(0); ++i) {
    if (p[i] < 0 || p[i] >= len) {
      throw py::value_error("slot " + std::to_string(p[i]) + " is outside [0, " + std::to_string(len) + ")");
    }
  }
  return s;
}

py::ssize_t length(const py::handle& obj) { return py::reinterpret_borrow<py::array>(obj).shape(0); }

}  // namespace

void register_slot_generations(py::module_& m) {
  m.def(
      "generations_begin_write",
      [](const py::handle& gens_obj, const py::handle& slots_obj) {
        std::uint64_t* g = live_u64(gens_obj, "generations");
        I64 s = checked_slots(slots_obj, length(gens_obj));
        for (py::ssize_t i = 0; i < s.shape(0); ++i) {
          std::uint64_t* p = g + s.data()[i];
          const std::uint64_t v = __atomic_load_n(p, __ATOMIC_RELAXED);
          // Odd = being written. An odd value left by a writer that died mid-write stays odd but
          // still changes, so a reader holding either value sees the row as torn.
          __atomic_store_n(p, (v & 1) ? v + 2 : v + 1, __ATOMIC_RELAXED);
        }
        __atomic_thread_fence(__ATOMIC_RELEASE);
      },
      py::arg("generations"), py::arg("slots"), "Mark slots as being written (generation becomes odd).");
  m.def(
      "generations_end_write",
      [](const py::handle& gens_obj, const py::handle& slots_obj) {
        std::uint64_t* g = live_u64(gens_obj, "generations");
        I64 s = checked_slots(slots_obj, length(gens_obj));
        for (py::ssize_t i = 0; i < s.shape(0); ++i) {
          std::uint64_t* p = g + s.data()[i];
          const std::uint64_t v = __atomic_load_n(p, __ATOMIC_RELAXED);
          __atomic_store_n(p, (v & 1) ? v + 1 : v + 2, __ATOMIC_RELEASE);
        }
      },
      py::arg("generations"), py::arg("slots"), "Publish written slots (generation becomes the next even value).");
  m.def(
      "generations_read",
      [](const py::handle& gens_obj, const py::handle& slots_obj) {
        const std::uint64_t* g = live_u64(gens_obj, "generations");
        I64 s = checked_slots(slots_obj, length(gens_obj));
        py::array_t<std::uint64_t> out(s.shape(0));
        std::uint64_t* o = out.mutable_data();
        for (py::ssize_t i = 0; i < s.shape(0); ++i) o[i] = __atomic_load_n(g + s.data()[i], __ATOMIC_ACQUIRE);
        return out;
      },
      py::arg("generations"), py::arg("slots"), "Generations of slots, read before copying their rows.");
  m.def(
      "generations_torn",
      [](const py::handle& gens_obj, const py::handle& slots_obj, const py::handle& first_obj) {
        const std::uint64_t* g = live_u64(gens_obj, "generations");
        I64 s = checked_slots(slots_obj, length(gens_obj));
        auto first = py::array_t<std::uint64_t, py::array::c_style | py::array::forcecast>::ensure(first_obj);
        if (!first || first.ndim() != 1 || first.shape(0) != s.shape(0)) {
          throw py::value_error("first generations must be a 1-D array as long as slots");
        }
        __atomic_thread_fence(__ATOMIC_ACQUIRE);  // the row copies happen before the re-read
        std::vector<std::int64_t> torn;
        for (py::ssize_t i = 0; i < s.shape(0); ++i) {
          const std::uint64_t f = first.data()[i];
          if ((f & 1) || __atomic_load_n(g + s.data()[i], __ATOMIC_RELAXED) != f) torn.push_back(i);
        }
        return py::array_t<std::int64_t>(static_cast<py::ssize_t>(torn.size()), torn.data());
      },
      py::arg("generations"), py::arg("slots"), py::arg("first"),
      "Positions whose rows may be torn: first generation odd, or changed since it was read.");
  m.def(
      "gather_rows",
      [](const py::handle& gens_obj, const py::handle& slots_obj, const py::tuple& columns) {
        const std::uint64_t* g = live_u64(gens_obj, "generations");
        const py::ssize_t cap = length(gens_obj);
        I64 s = checked_slots(slots_obj, cap);
        const py::ssize_t n = s.shape(0);
        struct Col {
          const char* src;
          char* dst;
          std::size_t row_bytes;
        };
        std::vector<Col> cols;
        py::list outs;
        for (const py::handle& c : columns) {
          if (!py::isinstance<py::array>(c)) throw py::type_error("columns must be numpy arrays");
          auto a = py::reinterpret_borrow<py::array>(c);
          if (a.ndim() < 1 || !(a.flags() & py::array::c_style) || a.shape(0) < cap) {
            throw py::type_error("columns must be C-contiguous numpy arrays with at least one row per slot");
          }
          const py::dtype dt = a.dtype();
          if (dt.kind() == 'O' || (dt.has_fields() && dt.attr("hasobject").cast<bool>())) {
            throw py::type_error("columns must hold plain numbers, not Python objects (copying object pointers "
                                 "without their references would corrupt them)");
          }
          std::vector<py::ssize_t> shape(a.shape(), a.shape() + a.ndim());
          shape[0] = n;
          py::array out(a.dtype(), shape);
          cols.push_back({static_cast<const char*>(a.data()), static_cast<char*>(out.mutable_data()),
                          row_bytes_of(a)});
          outs.append(out);
        }
        py::array_t<std::uint64_t> first(n);
        std::uint64_t* f = first.mutable_data();
        std::vector<std::int64_t> torn;
        {
          py::gil_scoped_release release;
          const std::int64_t* sl = s.data();
          // Rows are random and mostly not cached: start their misses early. 16 rows ahead (two
          // lines per row and column) measured best: shorter exposes latency, longer thrashes.
          constexpr py::ssize_t kAhead = 16;
          for (py::ssize_t i = 0; i < n; ++i) {
            if (i + kAhead < n) __builtin_prefetch(g + sl[i + kAhead]);
            f[i] = __atomic_load_n(g + sl[i], __ATOMIC_ACQUIRE);
          }
          for (py::ssize_t i = 0; i < n; ++i) {
            if (i + kAhead < n) {
              for (const Col& c : cols) {
                __builtin_prefetch(c.src + sl[i + kAhead] * c.row_bytes);
                __builtin_prefetch(c.src + sl[i + kAhead] * c.row_bytes + c.row_bytes - 1);
              }
            }
            for (const Col& c : cols) std::memcpy(c.dst + i * c.row_bytes, c.src + sl[i] * c.row_bytes, c.row_bytes);
          }
          __atomic_thread_fence(__ATOMIC_ACQUIRE);  // the row copies happen before the re-read
          for (py::ssize_t i = 0; i < n; ++i) {
            if ((f[i] & 1) || __atomic_load_n(g + sl[i], __ATOMIC_RELAXED) != f[i]) torn.push_back(i);
          }
        }
        return py::make_tuple(outs, first,
                              py::array_t<std::int64_t>(static_cast<py::ssize_t>(torn.size()), torn.data()));
      },
      py::arg("generations"), py::arg("slots"), py::arg("columns"),
      "Copy the rows of slots from each column (seqlock-checked): (copies, generations, torn positions).");
  m.def(
      "u64_load",
      [](const py::handle& arr, py::ssize_t i) {
        std::uint64_t* p = live_u64(arr, "array");
        if (i < 0 || i >= length(arr)) throw py::index_error("index out of range");
        return __atomic_load_n(p + i, __ATOMIC_ACQUIRE);
      },
      py::arg("array"), py::arg("index"), "Acquire-load of a uint64 word (e.g. a shared header field).");
  m.def(
      "u64_store",
      [](const py::handle& arr, py::ssize_t i, std::uint64_t v) {
        std::uint64_t* p = live_u64(arr, "array");
        if (i < 0 || i >= length(arr)) throw py::index_error("index out of range");
        __atomic_store_n(p + i, v, __ATOMIC_RELEASE);
      },
      py::arg("array"), py::arg("index"), py::arg("value"), "Release-store of a uint64 word.");
  m.def(
      "u64_compare_exchange",
      [](const py::handle& arr, py::ssize_t i, std::uint64_t expected, std::uint64_t desired) {
        std::uint64_t* p = live_u64(arr, "array");
        if (i < 0 || i >= length(arr)) throw py::index_error("index out of range");
        return __atomic_compare_exchange_n(p + i, &expected, desired, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
      },
      py::arg("array"), py::arg("index"), py::arg("expected"), py::arg("desired"),
      "Atomically replace a uint64 word if it equals `expected`; True if replaced.");
}

}  // namespace spreeze
