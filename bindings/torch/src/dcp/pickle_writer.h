// PickleWriter: emits a Python pickle (protocol 2) opcode by opcode.
//
// torch.distributed.checkpoint's `.metadata` is a pickle of its dataclasses
// (Metadata, TensorStorageMetadata, MetadataIndex, ...), which only Python's
// pickle module reads; libtorch's own Pickler writes IValues, not arbitrary
// classes. This writer covers what those dataclasses need: globals, NEWOBJ +
// BUILD, REDUCE, tuples, lists, dicts, ints, strings, booleans and None (and
// persistent ids, for a torch.save archive's data.pkl).
// No memo: every object is written out where it appears.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace memento::torch_adapter::dcp {

class PickleWriter {
 public:
  PickleWriter();  // PROTO 2

  void Global(std::string_view module, std::string_view name);
  void None();
  void Bool(bool v);
  void Int(int64_t v);
  void Str(std::string_view s);
  void Mark();
  void Tuple();       // the items since the last Mark
  void EmptyTuple();
  void EmptyList();
  void EmptyDict();
  void Appends();     // items since the last Mark onto the list below it
  void SetItems();    // key/value pairs since the last Mark into the dict below it
  void NewObj();      // cls, args -> cls.__new__(cls, *args)
  void Reduce();      // callable, args -> callable(*args)
  void Build();       // obj, state -> obj.__setstate__(state) or __dict__.update
  void PersId();      // pid -> persistent_load(pid) (a torch.save archive's storages)

  // torch.Size(values)
  void TorchSize(const std::vector<int64_t>& values);
  // An instance of `module.name` (a dataclass) built from a dict state whose
  // items `fill` pushes as key/value pairs.
  template <typename Fill>
  void Object(std::string_view module, std::string_view name, Fill fill) {
    Global(module, name);
    EmptyTuple();
    NewObj();
    EmptyDict();
    Mark();
    fill();
    SetItems();
    Build();
  }

  // The pickle, STOP appended; the writer is then spent.
  std::string Finish();

 private:
  std::string out_;
};

}  // namespace memento::torch_adapter::dcp
