#include "replicated_ranges.h"

namespace memento::torch_adapter {

uint64_t ReplicatedRangeBegin(const std::vector<ReplicatedBytes>& tensors, uint64_t k, uint64_t n) {
  uint64_t total = 0;
  for (const ReplicatedBytes& t : tensors) total += t.bytes;
  const uint64_t at = total * k / n;
  uint64_t offset = 0;
  for (const ReplicatedBytes& t : tensors) {
    if (at < offset + t.bytes) return offset + (at - offset) / t.element * t.element;
    offset += t.bytes;
  }
  return at;
}

}  // namespace memento::torch_adapter
