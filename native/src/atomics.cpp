// Release/acquire publish on shared memory for the IPC layer (spreeze_like/ipc/).
//
// Python owns the segment layouts (offsets are passed in); this file owns the orderings:
//   RingCore   SPSC ring of fixed-size float32 records: one call copies a batch and publishes it;
//              a full (writer) or empty (reader) side sleeps on a futex doorbell, not a poll loop.
//   BoardCore  double-buffered seqlock for a flat float32 vector (weight boards).
//   load_u64 / store_u64 / fetch_add_u64 / fences: single words, for headers and tests.
// The hot calls (RingCore.push / pop_into) take the array as a plain object and use the buffer
// protocol directly: pybind11's py::buffer / py::array casters allocate shape vectors on every
// call, which would cost more than the copy of one 168-byte transition.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <sched.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

#include "spreeze/shm_seq.hpp"

namespace py = pybind11;

namespace spreeze {
namespace {

// Above this many bytes a copy releases the GIL, so other Python threads of the process (a
// learner's main loop beside a feeder thread) run meanwhile; below it the release costs more.
constexpr Py_ssize_t kReleaseGilBytes = 1 << 16;

// A buffer export held for as long as the guard lives (RAII around PyObject_GetBuffer).
class BufferGuard {
 public:
  BufferGuard(PyObject* obj, int flags) {
    if (PyObject_GetBuffer(obj, &view_, flags) != 0) throw py::error_already_set();
  }
  ~BufferGuard() { PyBuffer_Release(&view_); }
  BufferGuard(const BufferGuard&) = delete;
  BufferGuard& operator=(const BufferGuard&) = delete;
  const Py_buffer& view() const { return view_; }
  char* ptr() const { return static_cast<char*>(view_.buf); }

 private:
  Py_buffer view_{};
};

// A ring whose counters say something no sound ring can (more records published than it holds)
// has had its shared memory overwritten, or is shared by two writers or two readers: raised as
// spreeze_like.errors.ShmError (one line for the user), RuntimeError where that cannot be imported.
[[noreturn]] void throw_shm_error(const std::string& message) {
  py::object type = py::reinterpret_borrow<py::object>(PyExc_RuntimeError);
  try {
    type = py::module_::import("spreeze_like.errors").attr("ShmError");
  } catch (py::error_already_set&) {
  }
  PyErr_SetString(type.ptr(), message.c_str());
  throw py::error_already_set();
}

bool is_float32(const Py_buffer& v) {
  if (v.itemsize != 4 || v.format == nullptr) return false;
  const char* f = v.format;
  if (*f == '<' || *f == '=' || *f == '@') ++f;
  return f[0] == 'f' && f[1] == '\0';
}

// Number of records in a C-contiguous float32 array of shape (n, width) or (width,).
uint64_t count_records(const Py_buffer& v, uint64_t record_bytes, const char* what) {
  const bool ok_shape = (v.ndim == 2 && static_cast<uint64_t>(v.shape[1]) * 4 == record_bytes) ||
                        (v.ndim == 1 && static_cast<uint64_t>(v.len) == record_bytes);
  if (!is_float32(v) || !ok_shape) {
    std::string shape = "(";
    for (int i = 0; i < v.ndim; ++i) shape += std::to_string(v.shape[i]) + (i + 1 < v.ndim ? ", " : "");
    shape += v.ndim == 1 ? ",)" : ")";
    throw py::value_error(std::string(what) + " must be a C-contiguous float32 array of shape (n, " +
                          std::to_string(record_bytes / 4) + ") or (" + std::to_string(record_bytes / 4) +
                          ",); got shape " + shape + " with format '" + (v.format ? v.format : "?") + "'");
  }
  return static_cast<uint64_t>(v.len) / record_bytes;
}

// A borrowed view of a caller's record array for the duration of one call.
struct RecordsArg {
  char* ptr;
  uint64_t n;
};

// Fast path for the hot calls: an exact, aligned, C-contiguous, native-endian float32 numpy array
// is read straight from its struct (about 15 ns) instead of through the buffer protocol (about
// 90 ns, which builds a format string and shape tuple on every call). Anything else returns false
// and takes the buffer-protocol path, which also produces the error message.
bool fast_records(PyObject* obj, uint64_t record_bytes, bool writable, RecordsArg* out) {
  auto& api = py::detail::npy_api::get();
  if (!api.PyArray_Check_(obj)) return false;
  const auto* arr = py::detail::array_proxy(obj);
  const auto* descr = py::detail::array_descriptor_proxy(arr->descr);
  constexpr int need = py::detail::npy_api::NPY_ARRAY_C_CONTIGUOUS_ | py::detail::npy_api::NPY_ARRAY_ALIGNED_;
  const int flags = arr->flags;
  if ((flags & need) != need || descr->type_num != py::detail::npy_api::NPY_FLOAT_ || descr->byteorder == '>')
    return false;
  if (writable && !(flags & py::detail::npy_api::NPY_ARRAY_WRITEABLE_)) return false;
  if (arr->nd == 2 && static_cast<uint64_t>(arr->dimensions[1]) * 4 == record_bytes) {
    out->n = static_cast<uint64_t>(arr->dimensions[0]);
  } else if (arr->nd == 1 && static_cast<uint64_t>(arr->dimensions[0]) * 4 == record_bytes) {
    out->n = 1;
  } else {
    return false;
  }
  out->ptr = arr->data;
  return true;
}

// The segment's memory, exported for the lifetime of the owning object: while it is held,
// mmap.close() raises BufferError instead of unmapping memory this object still points into.
class HeldSegment {
 public:
  explicit HeldSegment(const py::object& buffer) : guard_(buffer.ptr(), PyBUF_WRITABLE | PyBUF_SIMPLE) {}
  char* base() const { return guard_.ptr(); }
  uint64_t size() const { return static_cast<uint64_t>(guard_.view().len); }
  void check(uint64_t offset, uint64_t nbytes, uint64_t align, const char* what) const {
    if (offset + nbytes > size() || offset + nbytes < offset)
      throw py::value_error(std::string(what) + " runs past the end of the shared-memory segment");
    if ((reinterpret_cast<uintptr_t>(base()) + offset) % align != 0)
      throw py::value_error(std::string(what) + " is not aligned to " + std::to_string(align) + " bytes");
  }

 private:
  BufferGuard guard_;
};

class RingCore {
 public:
  RingCore(const py::object& segment, uint64_t write_seq_off, uint64_t read_seq_off, uint64_t data_off,
           uint64_t capacity, uint64_t record_bytes, std::string name)
      : seg_(segment), name_(std::move(name)) {
    if (capacity == 0 || record_bytes == 0) throw py::value_error("ring capacity and record size must be > 0");
    uint64_t data_bytes = 0;
    if (__builtin_mul_overflow(capacity, record_bytes, &data_bytes))
      throw py::value_error("ring data of " + std::to_string(capacity) + " records of " + std::to_string(record_bytes) +
                            " bytes is too large: the size overflows 64 bits");
    seg_.check(data_off, data_bytes, 4, "ring data");
    seg_.check(write_seq_off, 24, 8, "writer's header line");
    seg_.check(read_seq_off, 16, 8, "reader's header line");
    ring_ = RingView{atomic_at(seg_.base(), write_seq_off), atomic_at(seg_.base(), read_seq_off),
                     seg_.base() + data_off, capacity, record_bytes};
    // Each side's line: its counter (u64 +0), its doorbell (u32 +8), the *other* side's waiting
    // flag (u32 +12, so the publisher's check reads its own line); the writer's end flag (u64 +16).
    to_reader_ = Doorbell{atomic32_at(seg_.base(), write_seq_off + 8), atomic32_at(seg_.base(), write_seq_off + 12)};
    to_writer_ = Doorbell{atomic32_at(seg_.base(), read_seq_off + 8), atomic32_at(seg_.base(), read_seq_off + 12)};
    closed_ = atomic_at(seg_.base(), write_seq_off + 16);
    // A (re)attached side continues from the published counters: a restarted writer never reuses
    // a sequence number, and records it had copied but not published are simply overwritten.
    local_w_ = ring_.write_seq->load(std::memory_order_acquire);
    local_r_ = ring_.read_seq->load(std::memory_order_acquire);
    cached_r_ = local_r_;
    cached_w_ = local_w_;
  }

  // Writer: copy as many records of src[start:] as fit and publish them; returns how many are left.
  uint64_t push(const py::handle& src, uint64_t start) {
    RecordsArg rec{};
    if (fast_records(src.ptr(), ring_.record_bytes, false, &rec)) {
      // Small copies keep the GIL, so the caller's reference keeps the array alive and unchanged.
      if (rec.n * ring_.record_bytes < static_cast<uint64_t>(kReleaseGilBytes)) return push_raw(rec, start, false);
    }
    BufferGuard buf(src.ptr(), PyBUF_C_CONTIGUOUS | PyBUF_FORMAT);
    rec = RecordsArg{buf.ptr(), count_records(buf.view(), ring_.record_bytes, "records")};
    return push_raw(rec, start, true);
  }

  // Reader: records published and not yet released.
  uint64_t available() {
    cached_w_ = ring_.write_seq->load(std::memory_order_acquire);
    return checked_fill(cached_w_, local_r_);
  }

  // Reader: (slot index of the next record, records readable contiguously from there).
  py::tuple peek() {
    const uint64_t avail = available();
    const uint64_t slot = local_r_ % ring_.capacity;
    const uint64_t contiguous = ring_.capacity - slot;
    return py::make_tuple(slot, avail < contiguous ? avail : contiguous);
  }

  // Reader: hand `n` records back to the writer (after copying them out of a peeked view).
  void release(uint64_t n) {
    if (n > cached_w_ - local_r_ && n > available())
      throw py::value_error("release(" + std::to_string(n) + ") exceeds the records available");
    local_r_ += n;
    ring_.read_seq->store(local_r_, std::memory_order_release);
    to_writer_.notify();
  }

  // Reader: copy up to len(dst) records into dst and release them; returns how many.
  uint64_t pop_into(const py::handle& dst) {
    RecordsArg rec{};
    if (fast_records(dst.ptr(), ring_.record_bytes, true, &rec) &&
        rec.n * ring_.record_bytes < static_cast<uint64_t>(kReleaseGilBytes))
      return pop_raw(rec, false);
    BufferGuard buf(dst.ptr(), PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE);
    rec = RecordsArg{buf.ptr(), count_records(buf.view(), ring_.record_bytes, "out")};
    return pop_raw(rec, true);
  }

  // Writer: sleep until `n` slots are free (at most the capacity) or timeout_s passes; true if free.
  bool wait_space(uint64_t n, double timeout_s) {
    const uint64_t need = n < ring_.capacity ? n : ring_.capacity;
    py::gil_scoped_release nogil;
    return to_writer_.wait(
        [&] {
          cached_r_ = ring_.read_seq->load(std::memory_order_acquire);
          const uint64_t fill = local_w_ - cached_r_;
          return fill > ring_.capacity || ring_.capacity - fill >= need;  // corrupt: wake, push() says so
        },
        timeout_s);
  }

  // Reader: sleep until a record is published or the writer closed the stream; returns available().
  uint64_t wait_data(double timeout_s) {
    {
      py::gil_scoped_release nogil;
      to_reader_.wait(
          [&] {
            return ring_.write_seq->load(std::memory_order_acquire) != local_r_ ||
                   closed_->load(std::memory_order_acquire) != 0;
          },
          timeout_s);
    }
    return available();
  }

  // Writer: set or clear the end-of-stream flag (release) and wake a sleeping reader.
  void set_closed(bool closed) {
    closed_->store(closed ? 1 : 0, std::memory_order_release);
    to_reader_.notify();
  }

  bool closed() const { return closed_->load(std::memory_order_acquire) != 0; }

  uint64_t write_seq() const { return ring_.write_seq->load(std::memory_order_acquire); }
  uint64_t read_seq() const { return ring_.read_seq->load(std::memory_order_acquire); }

 private:
  uint64_t push_raw(const RecordsArg& rec, uint64_t start, bool may_release_gil) {
    if (start >= rec.n) return 0;
    const uint64_t want = rec.n - start;
    uint64_t free_slots = ring_.capacity - checked_fill(local_w_, cached_r_);
    if (free_slots < want) {  // only touch the reader's cache line when the cached view says full
      cached_r_ = ring_.read_seq->load(std::memory_order_acquire);
      free_slots = ring_.capacity - checked_fill(local_w_, cached_r_);
    }
    const uint64_t k = want < free_slots ? want : free_slots;
    if (k == 0) return want;
    const char* from = rec.ptr + start * ring_.record_bytes;
    if (may_release_gil && k * ring_.record_bytes >= static_cast<uint64_t>(kReleaseGilBytes)) {
      py::gil_scoped_release nogil;
      ring_.copy_in(local_w_, from, k);
    } else {
      ring_.copy_in(local_w_, from, k);
    }
    local_w_ += k;
    ring_.write_seq->store(local_w_, std::memory_order_release);
    to_reader_.notify();
    return want - k;
  }

  uint64_t pop_raw(const RecordsArg& rec, bool may_release_gil) {
    uint64_t k = available();
    if (k > rec.n) k = rec.n;
    if (k == 0) return 0;
    if (may_release_gil && k * ring_.record_bytes >= static_cast<uint64_t>(kReleaseGilBytes)) {
      py::gil_scoped_release nogil;
      ring_.copy_out(local_r_, rec.ptr, k);
    } else {
      ring_.copy_out(local_r_, rec.ptr, k);
    }
    local_r_ += k;
    ring_.read_seq->store(local_r_, std::memory_order_release);
    to_writer_.notify();
    return k;
  }

  // Records published and not released, from counters of which one came out of shared memory. A
  // sound ring never holds more than its capacity; a larger difference (or a negative one, which
  // wraps) would make the copies run past the mapping, so it is refused, never clamped into a
  // silent stream of stale records.
  uint64_t checked_fill(uint64_t w, uint64_t r) const {
    const uint64_t fill = w - r;
    if (fill > ring_.capacity)
      throw_shm_error("ring " + name_ + " has corrupt counters in shared memory (write_seq " + std::to_string(w) +
                      ", read_seq " + std::to_string(r) + ", capacity " + std::to_string(ring_.capacity) +
                      "): another process wrote into its header, or two writers or two readers share it; "
                      "restart the run");
    return fill;
  }

  HeldSegment seg_;
  std::string name_;
  RingView ring_{};
  Doorbell to_reader_{}, to_writer_{};
  std::atomic<uint64_t>* closed_ = nullptr;
  uint64_t local_w_ = 0, cached_r_ = 0;  // writer side
  uint64_t local_r_ = 0, cached_w_ = 0;  // reader side
};

class BoardCore {
 public:
  BoardCore(const py::object& segment, uint64_t latest_off, uint64_t seq0_off, uint64_t seq1_off, uint64_t slot0_off,
            uint64_t slot1_off, uint64_t nbytes)
      : seg_(segment) {
    seg_.check(latest_off, 8, 8, "latest");
    seg_.check(seq0_off, 8, 8, "seq0");
    seg_.check(seq1_off, 8, 8, "seq1");
    seg_.check(slot0_off, nbytes, 4, "slot0");
    seg_.check(slot1_off, nbytes, 4, "slot1");
    board_.latest = atomic_at(seg_.base(), latest_off);
    board_.seq[0] = atomic_at(seg_.base(), seq0_off);
    board_.seq[1] = atomic_at(seg_.base(), seq1_off);
    board_.slot[0] = seg_.base() + slot0_off;
    board_.slot[1] = seg_.base() + slot1_off;
    board_.nbytes = nbytes;
  }

  uint64_t publish(const py::handle& src) {
    BufferGuard buf(src.ptr(), PyBUF_C_CONTIGUOUS | PyBUF_FORMAT);
    check_vector(buf.view(), "params");
    // The single writer may be a restarted process: continue from the published version.
    const uint64_t v = board_.latest->load(std::memory_order_relaxed) + 1;
    if (static_cast<Py_ssize_t>(board_.nbytes) >= kReleaseGilBytes) {
      py::gil_scoped_release nogil;
      board_.publish(v, buf.ptr());
    } else {
      board_.publish(v, buf.ptr());
    }
    return v;
  }

  uint64_t latest() const { return board_.latest->load(std::memory_order_acquire); }

  // Copy the newest complete version into dst; returns it, 0 if none was published yet, or -1
  // after max_tries torn attempts (the caller sleeps and retries, with its own timeout).
  int64_t read(const py::handle& dst, int max_tries) {
    BufferGuard buf(dst.ptr(), PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE);
    check_vector(buf.view(), "out");
    py::gil_scoped_release nogil;  // a retry loop over a multi-MB copy must not hold the GIL
    for (int i = 0; i < max_tries; ++i) {
      const uint64_t v = board_.try_read(buf.ptr());
      if (v != UINT64_MAX) return static_cast<int64_t>(v);
      if (i % 16 == 15) sched_yield();
    }
    return -1;
  }

 private:
  void check_vector(const Py_buffer& v, const char* what) const {
    if (!is_float32(v) || static_cast<uint64_t>(v.len) != board_.nbytes)
      throw py::value_error(std::string(what) + " must be a C-contiguous float32 array of " +
                            std::to_string(board_.nbytes / 4) + " elements; got " + std::to_string(v.len) +
                            " bytes with format '" + (v.format ? v.format : "?") + "'");
  }
  HeldSegment seg_;
  SeqlockBoardView board_{};
};

std::atomic<uint64_t>* word(const BufferGuard& g, uint64_t offset) {
  if (offset % 8 != 0 || offset + 8 > static_cast<uint64_t>(g.view().len))
    throw py::value_error("offset " + std::to_string(offset) + " is not an 8-byte aligned word inside the buffer");
  if (reinterpret_cast<uintptr_t>(g.ptr()) % 8 != 0) throw py::value_error("buffer is not 8-byte aligned");
  return atomic_at(g.ptr(), offset);
}

}  // namespace

void register_atomics(py::module_& m) {
  py::class_<RingCore>(m, "RingCore", "Native side of an SPSC ring (see spreeze_like/ipc/ring.py).")
      .def(py::init<const py::object&, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, std::string>(),
           py::arg("segment"), py::arg("write_seq_off"), py::arg("read_seq_off"), py::arg("data_off"),
           py::arg("capacity"), py::arg("record_bytes"), py::arg("name") = std::string("(unnamed)"))
      .def(
          "push", [](RingCore& self, const py::handle& src) { return self.push(src, 0); }, py::arg("src"),
          "Writer: copy src into free slots, publish (release); return records not written.")
      .def("push_from", &RingCore::push, py::arg("src"), py::arg("start"),
           "Writer: like push, starting at row `start` of src (for the rest of a partly written batch).")
      .def("available", &RingCore::available, "Reader: published records not yet released (acquire).")
      .def("peek", &RingCore::peek, "Reader: (slot of next record, records readable contiguously).")
      .def("release", &RingCore::release, py::arg("n"), "Reader: free n records for the writer (release).")
      .def("pop_into", &RingCore::pop_into, py::arg("dst"), "Reader: copy up to len(dst) records, release them.")
      .def("wait_space", &RingCore::wait_space, py::arg("n"), py::arg("timeout_s"),
           "Writer: sleep (GIL released) until n slots are free or timeout; True if they are.")
      .def("wait_data", &RingCore::wait_data, py::arg("timeout_s"),
           "Reader: sleep (GIL released) until data or end of stream or timeout; returns available().")
      .def("set_closed", &RingCore::set_closed, py::arg("closed"), "Writer: set the end-of-stream flag, wake reader.")
      .def("closed", &RingCore::closed, "End-of-stream flag (acquire).")
      .def("write_seq", &RingCore::write_seq)
      .def("read_seq", &RingCore::read_seq);

  py::class_<BoardCore>(m, "BoardCore", "Native side of a double-buffered seqlock (weight_board.py).")
      .def(py::init<const py::object&, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t>(),
           py::arg("segment"), py::arg("latest_off"), py::arg("seq0_off"), py::arg("seq1_off"), py::arg("slot0_off"),
           py::arg("slot1_off"), py::arg("nbytes"))
      .def("publish", &BoardCore::publish, py::arg("src"), "Writer: publish src as the next version; return it.")
      .def("latest", &BoardCore::latest, "Newest complete version (acquire); 0 if none.")
      .def("read", &BoardCore::read, py::arg("dst"), py::arg("max_tries") = 1000,
           "Copy the newest version into dst; return it, 0 if none yet, -1 if every try was torn.");

  m.def(
      "load_u64",
      [](const py::object& buf, uint64_t offset) {
        BufferGuard g(buf.ptr(), PyBUF_SIMPLE);
        return word(g, offset)->load(std::memory_order_acquire);
      },
      py::arg("buf"), py::arg("offset"), "Load-acquire the 64-bit word at buf[offset].");
  m.def(
      "store_u64",
      [](const py::object& buf, uint64_t offset, uint64_t value) {
        BufferGuard g(buf.ptr(), PyBUF_SIMPLE | PyBUF_WRITABLE);
        word(g, offset)->store(value, std::memory_order_release);
      },
      py::arg("buf"), py::arg("offset"), py::arg("value"), "Store-release value into the 64-bit word at buf[offset].");
  m.def(
      "fetch_add_u64",
      [](const py::object& buf, uint64_t offset, uint64_t delta) {
        BufferGuard g(buf.ptr(), PyBUF_SIMPLE | PyBUF_WRITABLE);
        return word(g, offset)->fetch_add(delta, std::memory_order_acq_rel);
      },
      py::arg("buf"), py::arg("offset"), py::arg("delta"), "Atomic add (acq_rel); returns the old value.");
  m.def("fence_acquire", [] { std::atomic_thread_fence(std::memory_order_acquire); });
  m.def("fence_release", [] { std::atomic_thread_fence(std::memory_order_release); });
  m.def("fence_seq_cst", [] { std::atomic_thread_fence(std::memory_order_seq_cst); });
}

}  // namespace spreeze
