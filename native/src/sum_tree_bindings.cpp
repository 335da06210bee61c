// Python bindings of the K-ary sum tree: SumTreeK4/K8/K16/K32 over a writable Python buffer.
// Arrays cross as numpy arrays without copies when they already have the right dtype; every batch
// loop runs with the GIL released (a sampler blocked on another process's writer lock must not
// stall the Python threads of its own process).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <memory>
#include <random>

#include "spreeze/sum_tree.hpp"

namespace py = pybind11;

namespace spreeze {

void register_slot_generations(py::module_& m);  // slot_generations.cpp

constexpr int kDefaultK = 8;  // chosen by the K sweep of tools/bench_replay.py (docs/replay.md)

using I64 = py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>;
using F64 = py::array_t<double, py::array::c_style | py::array::forcecast>;
using U64 = py::array_t<std::uint64_t, py::array::c_style>;

// Integer arrays only: a float array of slots is a caller bug that a silent cast would hide.
I64 as_slots(const py::handle& obj) {
  py::array a = py::array::ensure(obj);
  if (!a) throw py::type_error("slots must be an integer array");
  const char kind = a.dtype().kind();
  if (kind != 'i' && kind != 'u') {
    throw py::type_error("slots must be an integer array, got dtype " + py::str(a.dtype()).cast<std::string>());
  }
  if (a.ndim() != 1) throw py::value_error("slots must be a 1-D array");
  return I64::ensure(a);
}

F64 as_values(const py::handle& obj, std::size_t n, const char* name) {
  F64 a = F64::ensure(obj);
  if (!a) throw py::type_error(std::string(name) + " must be a numeric array");
  if (a.ndim() != 1 || static_cast<std::size_t>(a.shape(0)) != n) {
    throw py::value_error(std::string(name) + " must be a 1-D array as long as slots (" + std::to_string(n) + ")");
  }
  return a;
}

// The live generation column of the storage: never copied, or the staleness check would read a
// snapshot.
const std::uint64_t* as_generations(const py::handle& obj, std::size_t min_len, const char* name) {
  if (!py::isinstance<py::array>(obj)) throw py::type_error(std::string(name) + " must be a numpy uint64 array");
  auto a = py::reinterpret_borrow<py::array>(obj);
  if (!a.dtype().is(py::dtype::of<std::uint64_t>()) || a.ndim() != 1 ||
      !(a.flags() & py::array::c_style)) {
    throw py::type_error(std::string(name) + " must be a 1-D C-contiguous numpy uint64 array");
  }
  if (static_cast<std::size_t>(a.shape(0)) < min_len) {
    throw py::value_error(std::string(name) + " has " + std::to_string(a.shape(0)) + " entries, needs " +
                          std::to_string(min_len));
  }
  // Read with atomic loads (the storage's writer changes them concurrently): natural alignment needed.
  if (reinterpret_cast<std::uintptr_t>(a.data()) % alignof(std::uint64_t) != 0) {
    throw py::value_error(std::string(name) + " must be 8-byte aligned for atomic access (view the buffer at an "
                          "offset that is a multiple of 8)");
  }
  return static_cast<const std::uint64_t*>(a.data());
}

template <int K>
struct PyTree {
  std::unique_ptr<py::buffer_info> buf;  // holds the buffer export: an mmap cannot be closed under us
  std::unique_ptr<KaryTree<K>> tree;

  PyTree(const py::buffer& b, std::uint64_t capacity, bool create, const py::object& seed) {
    buf = std::make_unique<py::buffer_info>(b.request(true));
    std::size_t expect = static_cast<std::size_t>(buf->itemsize);
    for (py::ssize_t d = buf->ndim; d-- > 0;) {
      if (buf->shape[d] != 1 && buf->strides[d] != static_cast<py::ssize_t>(expect)) {
        throw py::value_error("sum tree buffer must be C-contiguous");
      }
      expect *= static_cast<std::size_t>(buf->shape[d]);
    }
    const std::size_t nbytes = static_cast<std::size_t>(buf->size * buf->itemsize);
    const std::uint64_t s = seed.is_none() ? (std::uint64_t{std::random_device{}()} << 32) ^ std::random_device{}()
                                           : seed.cast<std::uint64_t>();
    tree = std::make_unique<KaryTree<K>>(buf->ptr, nbytes, capacity, create, s);
  }

  std::size_t update(const py::handle& slots_obj, const py::handle& values_obj, const py::handle& expected_obj,
                     const py::handle& gens_obj, bool td, double alpha, double eps) {
    I64 slots = as_slots(slots_obj);
    const auto n = static_cast<std::size_t>(slots.shape(0));
    F64 values = as_values(values_obj, n, td ? "td_errors" : "priorities");
    const std::uint64_t* expected = nullptr;
    const std::uint64_t* gens = nullptr;
    if (expected_obj.is_none() != gens_obj.is_none()) {
      throw py::value_error("pass both expected_generations and generations, or neither");
    }
    py::array expected_arr;
    if (!expected_obj.is_none()) {
      expected = as_generations(expected_obj, n, "expected_generations");
      expected_arr = py::reinterpret_borrow<py::array>(expected_obj);
      if (static_cast<std::size_t>(expected_arr.shape(0)) != n) {
        throw py::value_error("expected_generations must be as long as slots");
      }
      gens = as_generations(gens_obj, tree->capacity(), "generations");
    }
    py::gil_scoped_release release;
    return td ? tree->update_td(slots.data(), values.data(), n, alpha, eps, expected, gens)
              : tree->update(slots.data(), values.data(), n, expected, gens);
  }
};

template <int K>
void bind_tree(py::module_& m, const char* name) {
  using T = PyTree<K>;
  py::class_<T>(m, name,
                "K-ary sum tree (float64 sums, min of positive leaves) laid over a writable buffer. "
                "Use spreeze_like.replay.sum_tree.SumTree rather than this class directly.")
      .def(py::init<const py::buffer&, std::uint64_t, bool, const py::object&>(), py::arg("buffer"),
           py::arg("capacity"), py::arg("create"), py::arg("seed") = py::none())
      .def_static(
          "nbytes", [](std::uint64_t capacity) { return make_layout(capacity, K).nbytes; }, py::arg("capacity"))
      .def_property_readonly("capacity", [](const T& t) { return t.tree->capacity(); })
      .def_property_readonly("k", [](const T&) { return K; })
      .def_property_readonly("depth", [](const T& t) { return t.tree->layout().depth; })
      .def(
          "update",
          [](T& t, const py::handle& slots, const py::handle& priorities, const py::handle& expected,
             const py::handle& gens) { return t.update(slots, priorities, expected, gens, false, 1.0, 0.0); },
          py::arg("slots"), py::arg("priorities"), py::arg("expected_generations") = py::none(),
          py::arg("generations") = py::none())
      .def(
          "update_td",
          [](T& t, const py::handle& slots, const py::handle& td, double alpha, double eps, const py::handle& expected,
             const py::handle& gens) { return t.update(slots, td, expected, gens, true, alpha, eps); },
          py::arg("slots"), py::arg("td_errors"), py::arg("alpha"), py::arg("eps"),
          py::arg("expected_generations") = py::none(), py::arg("generations") = py::none())
      .def(
          "set_max",
          [](T& t, const py::handle& slots_obj) {
            I64 slots = as_slots(slots_obj);
            py::gil_scoped_release release;
            t.tree->set_max(slots.data(), static_cast<std::size_t>(slots.shape(0)));
          },
          py::arg("slots"))
      .def(
          "raise_max", [](T& t, double priority) { t.tree->raise_max(priority); }, py::arg("priority"))
      .def("rebuild",
           [](T& t) {
             py::gil_scoped_release release;
             t.tree->rebuild();
           })
      .def(
          "sample",
          [](T& t, std::size_t n, py::object beta) -> py::tuple {
            I64 slots(static_cast<py::ssize_t>(n));
            F64 probs(static_cast<py::ssize_t>(n));
            if (beta.is_none()) {
              {
                py::gil_scoped_release release;
                t.tree->sample(n, slots.mutable_data(), probs.mutable_data(), nullptr, 0.0);
              }
              return py::make_tuple(slots, probs);
            }
            const double b = beta.cast<double>();
            if (!(b >= 0) || !std::isfinite(b)) throw py::value_error("beta must be finite and >= 0");
            py::array_t<float> weights(static_cast<py::ssize_t>(n));
            {
              py::gil_scoped_release release;
              t.tree->sample(n, slots.mutable_data(), probs.mutable_data(), weights.mutable_data(), b);
            }
            return py::make_tuple(slots, probs, weights);
          },
          py::arg("n"), py::arg("beta") = py::none())
      .def(
          "find",
          [](T& t, const py::handle& prefix_obj) {
            F64 prefix = F64::ensure(prefix_obj);
            if (!prefix || prefix.ndim() != 1) throw py::value_error("prefix sums must be a 1-D float array");
            const auto n = static_cast<std::size_t>(prefix.shape(0));
            I64 out(static_cast<py::ssize_t>(n));
            py::gil_scoped_release release;
            t.tree->find(prefix.data(), n, out.mutable_data());
            return out;
          },
          py::arg("prefix_sums"))
      .def(
          "get",
          [](T& t, const py::handle& slots_obj) {
            I64 slots = as_slots(slots_obj);
            F64 out(slots.shape(0));
            t.tree->get(slots.data(), static_cast<std::size_t>(slots.shape(0)), out.mutable_data());
            return out;
          },
          py::arg("slots"))
      .def("total", [](const T& t) { return t.tree->total(); })
      .def("min", [](const T& t) { return t.tree->min_positive(); })
      .def("max_priority", [](const T& t) { return t.tree->max_priority(); })
      .def("lock_recoveries", [](const T& t) { return t.tree->lock_recoveries(); })
      .def("seed", [](T& t, std::uint64_t s) { t.tree->seed(s); }, py::arg("seed"))
      .def(
          "_die_mid_batch_for_tests",
          [](T& t, std::int64_t slot, double value) {
            py::gil_scoped_release release;
            t.tree->die_mid_batch_for_tests(slot, value);
          },
          py::arg("slot"), py::arg("value"), "Test hook: exit while holding the writer lock mid-batch.")
      .def(
          "level",
          [](py::object self, std::uint32_t level, bool mins) {
            T& t = self.cast<T&>();
            const TreeLayout& lay = t.tree->layout();
            if (level > lay.depth || (mins && level == lay.depth)) throw py::value_error("no such level");
            const KaryTree<K>& ct = *t.tree;
            const double* p = mins ? ct.mins(level) : ct.sums(level);
            // A read-only view of the live memory (for tests and monitoring), kept alive by the tree.
            py::array_t<double> view({static_cast<py::ssize_t>(lay.real[level])}, {sizeof(double)}, p, self);
            view.attr("setflags")(py::arg("write") = false);
            return view;
          },
          py::arg("level"), py::arg("mins") = false);
}

void register_sum_tree(py::module_& m) {
  bind_tree<4>(m, "SumTreeK4");
  bind_tree<8>(m, "SumTreeK8");
  bind_tree<16>(m, "SumTreeK16");
  bind_tree<32>(m, "SumTreeK32");
  m.attr("SUM_TREE_KS") = py::make_tuple(4, 8, 16, 32);
  m.attr("SUM_TREE_DEFAULT_K") = kDefaultK;
  m.def(
      "sum_tree_nbytes", [](std::uint64_t capacity, std::uint32_t k) { return make_layout(capacity, k).nbytes; },
      py::arg("capacity"), py::arg("k") = kDefaultK,
      "Bytes a sum tree of this capacity and K needs in its buffer (header and alignment slack included).");
  register_slot_generations(m);
}

}  // namespace spreeze
