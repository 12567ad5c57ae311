// A small GPT-style character language model (decoder-only transformer:
// token + position embeddings, pre-norm blocks of causal self-attention and
// an MLP, a final norm and a linear head). No dropout: the forward pass is a
// pure function of the parameters and the batch, so training is deterministic.
#pragma once

#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/types.h>

namespace memento::demo {

struct GptOptions {
  int64_t vocab = 64;
  int64_t context = 32;  // tokens per sequence
  int64_t dim = 64;      // embedding width
  int64_t heads = 4;
  int64_t blocks = 2;
};

class CausalSelfAttentionImpl : public torch::nn::Module {
 public:
  CausalSelfAttentionImpl(int64_t dim, int64_t heads, int64_t context);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  int64_t heads_;
  torch::nn::Linear qkv_{nullptr}, proj_{nullptr};
  torch::Tensor mask_;
};
TORCH_MODULE(CausalSelfAttention);

class BlockImpl : public torch::nn::Module {
 public:
  BlockImpl(int64_t dim, int64_t heads, int64_t context);
  torch::Tensor forward(torch::Tensor x);

 private:
  torch::nn::LayerNorm ln1_{nullptr}, ln2_{nullptr};
  CausalSelfAttention attn_{nullptr};
  torch::nn::Linear fc_{nullptr}, out_{nullptr};
};
TORCH_MODULE(Block);

class GptImpl : public torch::nn::Module {
 public:
  explicit GptImpl(const GptOptions& options);
  // tokens [B, T] (int64) -> logits [B, T, vocab].
  torch::Tensor forward(const torch::Tensor& tokens);

 private:
  GptOptions options_;
  torch::nn::Embedding tok_{nullptr}, pos_{nullptr};
  torch::nn::ModuleList blocks_;
  torch::nn::LayerNorm ln_{nullptr};
  torch::nn::Linear head_{nullptr};
};
TORCH_MODULE(Gpt);

}  // namespace memento::demo
