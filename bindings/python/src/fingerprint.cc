// tensor_fingerprint: what save() compares to reuse the entry list it built
// at the previous save (memento/_entry_cache.py). One pass in C++ over the
// objects the Python walk found, about 0.1 us each, where building the
// entries again costs several microseconds per tensor in Python.
#include "fingerprint.h"

#include <torch/csrc/autograd/python_variable.h>

#include <cstdint>
#include <string>
#include <vector>

namespace memento::torch_adapter {
namespace {

// Tags that keep the records of different kinds apart.
constexpr int64_t kTensorTag = 1;
constexpr int64_t kOtherTag = 2;

void AppendTensor(const at::Tensor& t, std::vector<int64_t>* out) {
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
  for (int64_t s : t.sizes()) out->push_back(s);
  if (t.layout() == at::kStrided) {
    for (int64_t s : t.strides()) out->push_back(s);
  }
}

}  // namespace

py::bytes TensorFingerprint(const py::sequence& objects) {
  std::vector<int64_t> out;
  out.reserve(objects.size() * 12);
  for (const py::handle obj : objects) {
    if (THPVariable_Check(obj.ptr())) {
      AppendTensor(THPVariable_Unpack(obj.ptr()), &out);
    } else {
      // Anything else (a module's extra state, made anew by every
      // state_dict(); a step counter kept as a number) counts by its type.
      out.push_back(kOtherTag);
      out.push_back(static_cast<int64_t>(reinterpret_cast<intptr_t>(Py_TYPE(obj.ptr()))));
    }
  }
  return py::bytes(reinterpret_cast<const char*>(out.data()), out.size() * sizeof(int64_t));
}

void BindFingerprint(py::module_& m) {
  m.def("tensor_fingerprint", &TensorFingerprint, py::arg("objects"),
        "bytes that change when any tensor of `objects` becomes another object or changes its "
        "storage, offset, dtype, device, shape or strides (other objects count by their type)");
}

}  // namespace memento::torch_adapter
