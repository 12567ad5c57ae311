// How the bytes of the replicated tensors are shared out among the ranks:
// each rank stores one range of their concatenation (in registration order),
// restores it and sends it to the others.
#pragma once

#include <cstdint>
#include <vector>

namespace memento::torch_adapter {

// A replicated tensor: its bytes and the size of one element.
struct ReplicatedBytes {
  uint64_t bytes = 0;
  uint64_t element = 1;
};

// Where rank k of n's range begins (k = n: where the last one ends): k/n of
// the way through the concatenation, moved back to the start of the element
// it falls in, so that every range holds whole elements (a persisted piece
// is then a block of its tensor, which torch.distributed.checkpoint can
// describe). The same on every rank.
uint64_t ReplicatedRangeBegin(const std::vector<ReplicatedBytes>& tensors, uint64_t k, uint64_t n);

}  // namespace memento::torch_adapter
