// Placeholder: filled in by the IPC layer (ring sequence numbers, seqlock).
#include <pybind11/pybind11.h>
namespace py = pybind11;
namespace spreeze {
void register_atomics(py::module_& m) { (void)m; }
}  // namespace spreeze
