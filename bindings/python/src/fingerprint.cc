// tensor_fingerprint: what save() compares to reuse the entry list it built
// at the previous save (memento/_entry_cache.py). One pass in C++ over the
// objects the Python walk found, about 0.1 us each, where building the
// entries again costs several microseconds per tensor in Python.
#include "fingerprint.h"

#include <c10/util/SmallVector.h>
#include <torch/csrc/autograd/python_variable.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace memento::torch_adapter {
namespace {

// Tags that keep the records of different kinds apart.
constexpr int64_t kTensorTag = 1;
constexpr int64_t kOtherTag = 2;

// One object's record: room for 12 dimensions before the record allocates.
using Record = c10::SmallVector<int64_t, 32>;

void RecordOf(py::handle obj, Record* out) {
  out->clear();
  if (!THPVariable_Check(obj.ptr())) {
    // Anything else (a module's extra state, made anew by every
    // state_dict(); a step counter kept as a number) counts by its type.
    out->push_back(kOtherTag);
    out->push_back(static_cast<int64_t>(reinterpret_cast<intptr_t>(Py_TYPE(obj.ptr()))));
    return;
  }
  const at::Tensor& t = THPVariable_Unpack(obj.ptr());
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  out->push_back(kTensorTag);
  out->push_back(static_cast<int64_t>(reinterpret_cast<intptr_t>(impl)));
  // A wrapper subclass (DTensor) has no storage of its own: its local
  // tensor is walked beside it. Its own storage must not be asked for.
  const bool has_data = impl->has_storage() && !impl->is_python_dispatch() &&
                        t.layout() == at::kStrided && !t.is_meta();
  out->push_back(has_data ? static_cast<int64_t>(reinterpret_cast<intptr_t>(impl->storage().data()))
                          : 0);
  out->push_back(has_data ? t.storage_offset() : 0);
  out->push_back(static_cast<int64_t>(t.scalar_type()));
  out->push_back(static_cast<int64_t>(t.device().type()));
  out->push_back(t.device().index());
  out->push_back(t.dim());
  for (int64_t v : t.sizes()) out->push_back(v);
  if (t.layout() == at::kStrided) {
    for (int64_t v : t.strides()) out->push_back(v);
  }
}

}  // namespace

py::bytes TensorFingerprint(const py::sequence& objects) {
  std::vector<int64_t> out;
  out.reserve(objects.size() * 12);
  Record record;
  for (const py::handle obj : objects) {
    RecordOf(obj, &record);
    out.insert(out.end(), record.begin(), record.end());
  }
  return py::bytes(reinterpret_cast<const char*>(out.data()), out.size() * sizeof(int64_t));
}

bool TensorFingerprintMatches(const py::sequence& objects, const py::bytes& expected) {
  char* data = nullptr;
  Py_ssize_t size = 0;
  if (PyBytes_AsStringAndSize(expected.ptr(), &data, &size) != 0) throw py::error_already_set();
  size_t at = 0;
  Record record;
  for (const py::handle obj : objects) {
    RecordOf(obj, &record);
    const size_t bytes = record.size() * sizeof(int64_t);
    if (at + bytes > static_cast<size_t>(size) || std::memcmp(data + at, record.data(), bytes) != 0)
      return false;
    at += bytes;
  }
  return at == static_cast<size_t>(size);
}

void BindFingerprint(py::module_& m) {
  m.def("tensor_fingerprint", &TensorFingerprint, py::arg("objects"),
        "bytes that change when any tensor of `objects` becomes another object or changes its "
        "storage, offset, dtype, device, shape or strides (other objects count by their type)");
  m.def("tensor_fingerprint_matches", &TensorFingerprintMatches, py::arg("objects"),
        py::arg("fingerprint"),
        "tensor_fingerprint(objects) == fingerprint, compared object by object as they are read "
        "(nothing allocated per call; stops at the first difference)");
}

}  // namespace memento::torch_adapter
