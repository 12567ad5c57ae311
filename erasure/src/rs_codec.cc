#include "memento/erasure/rs_codec.h"

#include <isa-l/erasure_code.h>

#include <algorithm>
#include <array>
#include <string>
#include <utility>

#include "byte_ranges.h"
#include "codec_arguments.h"
#include "decode_plan.h"

namespace memento::erasure {

namespace {

// DeltaUpdate folds the old and then the new contents block by block, so the
// parity block is still in cache for the second pass.
constexpr size_t kDeltaBlockBytes = size_t{64} << 10;

}  // namespace

RsCodec::RsCodec(int k, int m, CodecOptions options, std::vector<uint8_t> generator,
                 std::vector<uint8_t> encode_tables)
    : k_(k),
      m_(m),
      options_(options),
      generator_(std::move(generator)),
      encode_tables_(std::move(encode_tables)) {}

Result<RsCodec> RsCodec::Create(int k, int m, CodecOptions options) {
  if (k < 1 || k > kMaxK) {
    return Status::InvalidArgument("rs: k=" + std::to_string(k) + " is outside 1.." +
                                   std::to_string(kMaxK));
  }
  if (m < 1 || m > kMaxM) {
    return Status::InvalidArgument("rs: m=" + std::to_string(m) + " is outside 1.." +
                                   std::to_string(kMaxM));
  }
  if (Status s = internal::CheckOptions(options); !s.ok()) return s.WithContext("rs");
  const size_t ku = static_cast<size_t>(k), mu = static_cast<size_t>(m);
  std::vector<uint8_t> generator((ku + mu) * ku);
  gf_gen_cauchy1_matrix(generator.data(), k + m, k);
  std::vector<uint8_t> tables(32 * ku * mu);
  ec_init_tables(k, m, generator.data() + ku * ku, tables.data());
  return RsCodec(k, m, options, std::move(generator), std::move(tables));
}

Status RsCodec::Encode(const uint8_t* const* data, uint8_t* const* parity, size_t len) const {
  if (len == 0) return Status::Ok();
  if (Status s = internal::CheckEncodeArgs("rs encode", data, k_, parity, m_); !s.ok()) return s;
  unsigned char* tables = const_cast<uint8_t*>(encode_tables_.data());
  internal::ForEachRange(len, options_, [&](size_t offset, size_t length) {
    std::array<unsigned char*, kMaxK> in;
    std::array<unsigned char*, kMaxM> out;
    for (int i = 0; i < k_; ++i) in[i] = const_cast<uint8_t*>(data[i]) + offset;
    for (int i = 0; i < m_; ++i) out[i] = parity[i] + offset;
    ec_encode_data(static_cast<int>(length), k_, m_, tables, in.data(), out.data());
  });
  return Status::Ok();
}

Status RsCodec::Decode(uint8_t* const* rows, const std::vector<int>& erased, size_t len) const {
  if (erased.empty()) return Status::Ok();
  auto survivors = internal::PlanSurvivors(rows, k_, m_, erased);
  if (!survivors.ok()) return survivors.status().WithContext("rs decode");
  if (len == 0) return Status::Ok();
  auto coefficients =
      internal::SolveDecodeCoefficients(generator_, k_, m_, erased, survivors.value());
  if (!coefficients.ok()) return coefficients.status().WithContext("rs decode");
  const int rebuilt = static_cast<int>(erased.size());
  std::vector<uint8_t> tables(32 * static_cast<size_t>(k_) * erased.size());
  ec_init_tables(k_, rebuilt, coefficients->data(), tables.data());
  const std::vector<int>& from = survivors.value();
  internal::ForEachRange(len, options_, [&](size_t offset, size_t length) {
    std::array<unsigned char*, kMaxK> in;
    std::array<unsigned char*, kMaxM> out;
    for (int i = 0; i < k_; ++i) in[i] = rows[from[i]] + offset;
    for (int i = 0; i < rebuilt; ++i) out[i] = rows[erased[i]] + offset;
    ec_encode_data(static_cast<int>(length), k_, rebuilt, tables.data(), in.data(), out.data());
  });
  return Status::Ok();
}

Status RsCodec::EncodeUpdate(int data_row, const uint8_t* data, uint8_t* const* parity,
                             size_t len) const {
  if (Status s = internal::CheckUpdateArgs("rs encode update", data_row, k_, data, nullptr,
                                           /*delta=*/false, parity, m_, len);
      !s.ok())
    return s;
  if (len == 0) return Status::Ok();
  unsigned char* tables = const_cast<uint8_t*>(encode_tables_.data());
  internal::ForEachRange(len, options_, [&](size_t offset, size_t length) {
    std::array<unsigned char*, kMaxM> out;
    for (int i = 0; i < m_; ++i) out[i] = parity[i] + offset;
    ec_encode_data_update(static_cast<int>(length), k_, m_, data_row, tables,
                          const_cast<uint8_t*>(data) + offset, out.data());
  });
  return Status::Ok();
}

Status RsCodec::DeltaUpdate(int data_row, const uint8_t* old_data, const uint8_t* new_data,
                            uint8_t* const* parity, size_t len) const {
  if (Status s = internal::CheckUpdateArgs("rs delta update", data_row, k_, old_data, new_data,
                                           /*delta=*/true, parity, m_, len);
      !s.ok())
    return s;
  if (len == 0) return Status::Ok();
  if (old_data == new_data) return Status::Ok();
  // c*old ^ c*new == c*(old ^ new): fold both, no scratch buffer needed.
  unsigned char* tables = const_cast<uint8_t*>(encode_tables_.data());
  internal::ForEachRange(len, options_, [&](size_t offset, size_t length) {
    std::array<unsigned char*, kMaxM> out;
    for (size_t done = 0; done < length;) {
      size_t block = std::min(kDeltaBlockBytes, length - done);
      for (int i = 0; i < m_; ++i) out[i] = parity[i] + offset + done;
      ec_encode_data_update(static_cast<int>(block), k_, m_, data_row, tables,
                            const_cast<uint8_t*>(old_data) + offset + done, out.data());
      ec_encode_data_update(static_cast<int>(block), k_, m_, data_row, tables,
                            const_cast<uint8_t*>(new_data) + offset + done, out.data());
      done += block;
    }
  });
  return Status::Ok();
}

Result<std::vector<uint8_t>> RsCodec::DecodeCoefficients(const std::vector<int>& erased,
                                                         const std::vector<int>& survivors) const {
  auto c = internal::SolveDecodeCoefficients(generator_, k_, m_, erased, survivors);
  if (!c.ok()) return c.status().WithContext("rs decode coefficients");
  return c;
}

}  // namespace memento::erasure
