// Entry point of spreeze_like._native. Each concept lives in its own translation unit and
// registers its bindings here, so that owners of different parts never edit the same file.
#include <pybind11/pybind11.h>

namespace py = pybind11;

namespace spreeze {
void register_atomics(py::module_& m);   // atomics.cpp: release/acquire publish on shared memory
void register_sum_tree(py::module_& m);  // sum_tree.cpp: K-ary sum tree over handed memory
}  // namespace spreeze

PYBIND11_MODULE(_native, m) {
  m.doc() = "spreeze_like native core: shared-memory atomics and the K-ary sum tree";
  m.attr("ABI_VERSION") = 1;
  spreeze::register_atomics(m);
  spreeze::register_sum_tree(m);
}
