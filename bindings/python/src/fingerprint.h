// tensor_fingerprint for the Python package's entry cache (fingerprint.cc).
#pragma once

#include <pybind11/pybind11.h>

namespace memento::torch_adapter {

namespace py = pybind11;

// The identity and geometry of every tensor of `objects` (its TensorImpl, its
// storage's address, offset, dtype, device, sizes and strides) and the type
// of anything else, packed as bytes: equal bytes mean
// the same tensors in the same places.
py::bytes TensorFingerprint(const py::sequence& objects);

// TensorFingerprint(objects) == fingerprint, without building the bytes: each
// object's record is compared as it is read (the check of every save).
bool TensorFingerprintMatches(const py::sequence& objects, const py::bytes& fingerprint);

void BindFingerprint(py::module_& m);

}  // namespace memento::torch_adapter
