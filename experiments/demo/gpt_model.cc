#include "gpt_model.h"

#include <cmath>

namespace memento::demo {

CausalSelfAttentionImpl::CausalSelfAttentionImpl(int64_t dim, int64_t heads, int64_t context)
    : heads_(heads) {
  qkv_ = register_module("qkv", torch::nn::Linear(dim, 3 * dim));
  proj_ = register_module("proj", torch::nn::Linear(dim, dim));
  mask_ = torch::tril(torch::ones({context, context})).view({1, 1, context, context});
}

torch::Tensor CausalSelfAttentionImpl::forward(const torch::Tensor& x) {
  const int64_t b = x.size(0), t = x.size(1), c = x.size(2), hd = c / heads_;
  auto qkv = qkv_->forward(x).chunk(3, /*dim=*/2);
  auto split = [&](const torch::Tensor& y) { return y.view({b, t, heads_, hd}).transpose(1, 2); };
  torch::Tensor q = split(qkv[0]), k = split(qkv[1]), v = split(qkv[2]);
  torch::Tensor att = q.matmul(k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(hd)));
  att = att.masked_fill(mask_.narrow(2, 0, t).narrow(3, 0, t) == 0,
                        -std::numeric_limits<float>::infinity());
  att = torch::softmax(att, -1);
  torch::Tensor y = att.matmul(v).transpose(1, 2).contiguous().view({b, t, c});
  return proj_->forward(y);
}

BlockImpl::BlockImpl(int64_t dim, int64_t heads, int64_t context) {
  ln1_ = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim})));
  attn_ = register_module("attn", CausalSelfAttention(dim, heads, context));
  ln2_ = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim})));
  fc_ = register_module("fc", torch::nn::Linear(dim, 4 * dim));
  out_ = register_module("out", torch::nn::Linear(4 * dim, dim));
}

torch::Tensor BlockImpl::forward(torch::Tensor x) {
  x = x + attn_->forward(ln1_->forward(x));
  return x + out_->forward(torch::gelu(fc_->forward(ln2_->forward(x))));
}

GptImpl::GptImpl(const GptOptions& options) : options_(options) {
  tok_ = register_module("tok", torch::nn::Embedding(options.vocab, options.dim));
  pos_ = register_module("pos", torch::nn::Embedding(options.context, options.dim));
  blocks_ = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < options.blocks; ++i) {
    blocks_->push_back(Block(options.dim, options.heads, options.context));
  }
  ln_ = register_module("ln", torch::nn::LayerNorm(torch::nn::LayerNormOptions({options.dim})));
  head_ = register_module("head", torch::nn::Linear(options.dim, options.vocab));
}

torch::Tensor GptImpl::forward(const torch::Tensor& tokens) {
  const int64_t t = tokens.size(1);
  torch::Tensor x = tok_->forward(tokens) + pos_->forward(torch::arange(t, torch::kLong));
  for (const auto& block : *blocks_) x = block->as<Block>()->forward(x);
  return head_->forward(ln_->forward(x));
}

}  // namespace memento::demo
