// Partial-product decode: the plan's stripe decodes as reduce chains
// (reduce_chain.h).
//
// For stripe decode d with rebuilt data rows e and K' input rows s, the
// codec's DecodeCoefficients gives c[e][s] with row_e = XOR_s c[e][s] * row_s.
// Every rebuilt row becomes one chain over the K' input holders (each
// multiplies its own row by its coefficient and folds in the sum so far) into
// the rank that owns the rebuilt row. The chain covers the real bytes of the
// rebuilt piece only (its zero padding is not sent).
//
// Rule: every decode runs as chains. The owner of a rebuilt row then receives
// exactly that row (its shard's bytes in total) instead of the K' inputs
// (K' x as much), and the total traffic is the same K' rows per rebuilt row;
// with K' = 1 a chain is a plain copy of the one input. The start of each
// chain rotates with the stripe and the rebuilt row so that the first hop
// (which receives nothing) is spread over the survivors.
#pragma once

#include <vector>

#include "memento/common/status.h"
#include "memento/placement/recovery_plan.h"
#include "protect/protection_layout.h"
#include "protect/reduce_chain.h"

namespace memento::runtime {

// What chain i of BuildDecodeChains computes: rebuilt row `rebuilt` of
// plan.decodes[decode]; a term's row_id is its index in that decode's inputs.
struct DecodeChainInfo {
  int decode = -1;
  int rebuilt = -1;
};

// Chains for every decode of `plan` (rebuilt rows with zero real bytes are
// skipped). Errors: the codec rejects the decode (bad rows).
Status BuildDecodeChains(const placement::RecoveryPlan& plan, const ProtectionLayout& layout,
                         std::vector<ReduceChain>* chains, std::vector<DecodeChainInfo>* info);

}  // namespace memento::runtime
