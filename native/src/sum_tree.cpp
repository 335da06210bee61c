// Placeholder: filled in by the replay layer (K-ary sum tree).
#include <pybind11/pybind11.h>
namespace py = pybind11;
namespace spreeze {
void register_sum_tree(py::module_& m) { (void)m; }
}  // namespace spreeze
