#include "recovery/partial_decode.h"

#include "memento/erasure/rs_codec.h"
#include "memento/erasure/xor_codec.h"

namespace memento::runtime {

Status BuildDecodeChains(const placement::RecoveryPlan& plan, const ProtectionLayout& layout,
                         std::vector<ReduceChain>* chains, std::vector<DecodeChainInfo>* info) {
  chains->clear();
  info->clear();
  const bool is_xor = layout.scheme().kind() == placement::SchemeKind::kXor;
  for (size_t d = 0; d < plan.decodes.size(); ++d) {
    const placement::StripeDecode& dec = plan.decodes[d];
    const int k = dec.data_rows;
    std::vector<int> erased, survivors;
    for (const auto& rb : dec.rebuilt) erased.push_back(rb.row);
    for (const auto& in : dec.inputs) survivors.push_back(in.parity ? k + in.row : in.row);
    Result<std::vector<uint8_t>> coefs = Status::Internal("no codec");
    if (is_xor) {
      auto codec = erasure::XorCodec::Create(k);
      coefs = codec.ok() ? codec->DecodeCoefficients(erased, survivors) : codec.status();
    } else {
      auto codec = erasure::RsCodec::Create(k, dec.parity_rows);
      coefs = codec.ok() ? codec->DecodeCoefficients(erased, survivors) : codec.status();
    }
    if (!coefs.ok()) {
      return coefs.status().WithContext("decode of group " + std::to_string(dec.group) +
                                        " stripe " + std::to_string(dec.stripe));
    }
    const size_t n_in = dec.inputs.size();
    for (size_t e = 0; e < dec.rebuilt.size(); ++e) {
      const placement::StripeRow& rb = dec.rebuilt[e];
      ReduceChain chain;
      chain.dst_rank = layout.rank_of(rb.node, dec.lane);
      chain.length = layout.map(dec.lane).DataPieceBytes(rb.node, rb.row);
      if (chain.length == 0) continue;
      const size_t start = (static_cast<size_t>(dec.stripe) + e) % n_in;
      for (size_t i = 0; i < n_in; ++i) {
        const size_t s = (start + i) % n_in;
        ReduceTerm term;
        term.rank = layout.rank_of(dec.inputs[s].node, dec.lane);
        term.row_id = static_cast<int>(s);
        term.coef = (*coefs)[e * n_in + s];
        chain.terms.push_back(term);
      }
      chains->push_back(std::move(chain));
      info->push_back({static_cast<int>(d), static_cast<int>(e)});
    }
  }
  return Status::Ok();
}

}  // namespace memento::runtime
