// The byte format of the "__memento__" entry: a fixed-capacity buffer holding
// named byte strings.
//
//   u32 magic "MXS1" | u32 record count | u64 payload bytes |
//   per record: u32 key length, key, u64 value length, value
//
// Thread-safety: plain functions.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "memento/common/status.h"

namespace memento::torch_adapter {

// Bytes `records` needs when encoded.
uint64_t ExtraStateBytes(const std::map<std::string, std::string>& records);

// Encodes into [out, out + capacity); ResourceExhausted naming the size needed
// and the capacity when it does not fit.
Status EncodeExtraState(const std::map<std::string, std::string>& records, uint8_t* out,
                        uint64_t capacity);

// Decodes what EncodeExtraState wrote; Corruption when the bytes are not such a buffer.
Result<std::map<std::string, std::string>> DecodeExtraState(const uint8_t* in, uint64_t capacity);

}  // namespace memento::torch_adapter
