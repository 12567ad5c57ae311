#include "dcp/pickle_writer.h"

#include <cstring>

namespace memento::torch_adapter::dcp {
namespace {

// Opcodes of the pickle protocols 0-2 (Lib/pickle.py).
constexpr char kProto = '\x80';
constexpr char kGlobal = 'c';
constexpr char kNone = 'N';
constexpr char kNewTrue = '\x88';
constexpr char kNewFalse = '\x89';
constexpr char kBinInt1 = 'K';
constexpr char kBinInt2 = 'M';
constexpr char kBinInt = 'J';
constexpr char kLong1 = '\x8a';
constexpr char kBinUnicode = 'X';
constexpr char kMark = '(';
constexpr char kTuple = 't';
constexpr char kEmptyTuple = ')';
constexpr char kEmptyList = ']';
constexpr char kEmptyDict = '}';
constexpr char kAppends = 'e';
constexpr char kSetItems = 'u';
constexpr char kNewObj = '\x81';
constexpr char kReduce = 'R';
constexpr char kBuild = 'b';
constexpr char kBinPersId = 'Q';
constexpr char kStop = '.';

template <typename T>
void PutLE(std::string* out, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

}  // namespace

PickleWriter::PickleWriter() {
  out_.push_back(kProto);
  out_.push_back('\x02');
}

void PickleWriter::Global(std::string_view module, std::string_view name) {
  out_.push_back(kGlobal);
  out_.append(module);
  out_.push_back('\n');
  out_.append(name);
  out_.push_back('\n');
}

void PickleWriter::None() { out_.push_back(kNone); }
void PickleWriter::PersId() { out_.push_back(kBinPersId); }
void PickleWriter::Bool(bool v) { out_.push_back(v ? kNewTrue : kNewFalse); }

void PickleWriter::Int(int64_t v) {
  if (v >= 0 && v < 256) {
    out_.push_back(kBinInt1);
    out_.push_back(static_cast<char>(v));
  } else if (v >= 0 && v < 65536) {
    out_.push_back(kBinInt2);
    PutLE<uint16_t>(&out_, static_cast<uint16_t>(v));
  } else if (v >= INT32_MIN && v <= INT32_MAX) {
    out_.push_back(kBinInt);
    PutLE<uint32_t>(&out_, static_cast<uint32_t>(static_cast<int32_t>(v)));
  } else {
    // LONG1: a little-endian two's complement integer of n bytes.
    out_.push_back(kLong1);
    out_.push_back('\x08');
    PutLE<uint64_t>(&out_, static_cast<uint64_t>(v));
  }
}

void PickleWriter::Str(std::string_view s) {
  out_.push_back(kBinUnicode);
  PutLE<uint32_t>(&out_, static_cast<uint32_t>(s.size()));
  out_.append(s);
}

void PickleWriter::Mark() { out_.push_back(kMark); }
void PickleWriter::Tuple() { out_.push_back(kTuple); }
void PickleWriter::EmptyTuple() { out_.push_back(kEmptyTuple); }
void PickleWriter::EmptyList() { out_.push_back(kEmptyList); }
void PickleWriter::EmptyDict() { out_.push_back(kEmptyDict); }
void PickleWriter::Appends() { out_.push_back(kAppends); }
void PickleWriter::SetItems() { out_.push_back(kSetItems); }
void PickleWriter::NewObj() { out_.push_back(kNewObj); }
void PickleWriter::Reduce() { out_.push_back(kReduce); }
void PickleWriter::Build() { out_.push_back(kBuild); }

void PickleWriter::TorchSize(const std::vector<int64_t>& values) {
  // torch.Size.__reduce__: (torch.Size, (tuple(self),))
  Global("torch", "Size");
  Mark();
  Mark();
  for (int64_t v : values) Int(v);
  Tuple();
  Tuple();
  Reduce();
}

std::string PickleWriter::Finish() {
  out_.push_back(kStop);
  return std::move(out_);
}

}  // namespace memento::torch_adapter::dcp
