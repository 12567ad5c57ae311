#include "memento/erasure/xor_codec.h"

#include <array>
#include <string>
#include <utility>

#include "byte_ranges.h"
#include "codec_arguments.h"
#include "decode_plan.h"
#include "xor_kernel.h"

namespace memento::erasure {

namespace {

static_assert(XorCodec::kMaxK <= internal::kMaxXorSources, "XorRows takes k sources");

}  // namespace

XorCodec::XorCodec(int k, CodecOptions options, std::vector<uint8_t> generator)
    : k_(k), options_(options), generator_(std::move(generator)) {}

Result<XorCodec> XorCodec::Create(int k, CodecOptions options) {
  if (k < 1 || k > kMaxK) {
    return Status::InvalidArgument("xor: k=" + std::to_string(k) + " is outside 1.." +
                                   std::to_string(kMaxK));
  }
  if (Status s = internal::CheckOptions(options); !s.ok()) return s.WithContext("xor");
  const size_t ku = static_cast<size_t>(k);
  std::vector<uint8_t> generator((ku + 1) * ku, 0);
  for (size_t i = 0; i < ku; ++i) generator[i * ku + i] = 1;
  for (size_t j = 0; j < ku; ++j) generator[ku * ku + j] = 1;
  return XorCodec(k, options, std::move(generator));
}

Status XorCodec::Encode(const uint8_t* const* data, uint8_t* const* parity, size_t len) const {
  if (len == 0) return Status::Ok();
  if (Status s = internal::CheckEncodeArgs("xor encode", data, k_, parity, 1); !s.ok()) return s;
  internal::ForEachRange(len, options_, [&](size_t offset, size_t length) {
    std::array<const uint8_t*, kMaxK> in;
    for (int i = 0; i < k_; ++i) in[i] = data[i] + offset;
    internal::XorRows(in.data(), k_, parity[0] + offset, length);
  });
  return Status::Ok();
}

Status XorCodec::Decode(uint8_t* const* rows, const std::vector<int>& erased, size_t len) const {
  if (erased.empty()) return Status::Ok();
  auto survivors = internal::PlanSurvivors(rows, k_, 1, erased);
  if (!survivors.ok()) return survivors.status().WithContext("xor decode");
  if (len == 0) return Status::Ok();
  // One erased row, and the k survivors are all the other rows: their XOR.
  const std::vector<int>& from = survivors.value();
  uint8_t* target = rows[erased[0]];
  internal::ForEachRange(len, options_, [&](size_t offset, size_t length) {
    std::array<const uint8_t*, kMaxK> in;
    for (int i = 0; i < k_; ++i) in[i] = rows[from[i]] + offset;
    internal::XorRows(in.data(), k_, target + offset, length);
  });
  return Status::Ok();
}

Status XorCodec::EncodeUpdate(int data_row, const uint8_t* data, uint8_t* const* parity,
                              size_t len) const {
  if (Status s = internal::CheckUpdateArgs("xor encode update", data_row, k_, data, nullptr,
                                           /*delta=*/false, parity, 1, len);
      !s.ok())
    return s;
  if (len == 0) return Status::Ok();
  internal::ForEachRange(len, options_, [&](size_t offset, size_t length) {
    internal::XorInto(data + offset, parity[0] + offset, length);
  });
  return Status::Ok();
}

Status XorCodec::DeltaUpdate(int data_row, const uint8_t* old_data, const uint8_t* new_data,
                             uint8_t* const* parity, size_t len) const {
  if (Status s = internal::CheckUpdateArgs("xor delta update", data_row, k_, old_data, new_data,
                                           /*delta=*/true, parity, 1, len);
      !s.ok())
    return s;
  if (len == 0) return Status::Ok();
  if (old_data == new_data) return Status::Ok();
  internal::ForEachRange(len, options_, [&](size_t offset, size_t length) {
    internal::XorTwoInto(old_data + offset, new_data + offset, parity[0] + offset, length);
  });
  return Status::Ok();
}

Result<std::vector<uint8_t>> XorCodec::DecodeCoefficients(const std::vector<int>& erased,
                                                          const std::vector<int>& survivors) const {
  auto c = internal::SolveDecodeCoefficients(generator_, k_, 1, erased, survivors);
  if (!c.ok()) return c.status().WithContext("xor decode coefficients");
  return c;
}

}  // namespace memento::erasure
