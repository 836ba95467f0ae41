// An independent float64 DeBERTa v1 forward for the tests, written from the
// maths of ../shared/goldens/deberta_v1/README.md over the checkpoint's own
// Hugging Face tensors (in_proj viewed per head as [h, 3d], q_bias/v_bias,
// pos_proj, pos_q_proj, head_logits_proj/head_weights_proj): it shares no
// code with model/deberta_v1/ or the encoder, so configurations without a
// golden (talking_head, relative_attention off) can be checked against it.
// It is itself checked against the goldens (deberta_v1_golden_test.cc).
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <map>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "model/checkpoint/model_config.h"
#include "model/checkpoint/safetensors.h"

namespace dserve::v1test {

// Every tensor of a safetensors file as float64, by name (F32 files only).
inline std::map<std::string, torch::Tensor> ReadTensors(const std::string& path) {
  std::map<std::string, torch::Tensor> out;
  auto file = SafetensorsFile::Open(path);
  if (!file.ok()) throw std::runtime_error(std::string(file.status().message()));
  for (const TensorView& v : (*file)->tensors()) {
    if (v.dtype != DType::kF32) continue;
    out[v.name] = torch::from_blob(const_cast<void*>(static_cast<const void*>(v.data)), v.shape, torch::kFloat)
                      .to(torch::kDouble);
  }
  return out;
}

struct Reference {
  std::vector<torch::Tensor> layers;  // embedding output, then each layer's output: [B, L, H]
  torch::Tensor layer0_probs;         // [B, h, L, L]
  torch::Tensor logits;               // classification: [B, labels]
  torch::Tensor start, end;           // QA: [B, L]
};

// ids, mask, types: [B, L] int64 (types may be undefined).
inline Reference Forward(const ModelConfig& c, std::map<std::string, torch::Tensor>& w, const torch::Tensor& ids,
                         const torch::Tensor& mask, const torch::Tensor& types) {
  auto W = [&](const std::string& name) -> torch::Tensor& {
    auto it = w.find(name);
    if (it == w.end()) throw std::runtime_error("reference: no tensor " + name);
    return it->second;
  };
  auto ln = [&](const torch::Tensor& x, const std::string& p) {
    auto mean = x.mean(-1, true);
    auto var = (x - mean).pow(2).mean(-1, true);
    return (x - mean) / torch::sqrt(var + c.layer_norm_eps) * W(p + ".weight") + W(p + ".bias");
  };
  auto lin = [&](const torch::Tensor& x, const std::string& p, bool bias = true) {
    auto y = torch::matmul(x, W(p + ".weight").t());
    return bias ? y + W(p + ".bias") : y;
  };
  const int64_t B = ids.size(0), L = ids.size(1), H = c.hidden_size, h = c.num_attention_heads, d = H / h;
  std::vector<std::string> pos_att;
  for (const auto& p : c.pos_att_type) pos_att.push_back(p);
  const double s = std::sqrt(static_cast<double>(d) * (1 + pos_att.size()));
  auto has = [&](const char* t) { return std::find(pos_att.begin(), pos_att.end(), t) != pos_att.end(); };
  const auto m = mask.to(torch::kDouble);

  Reference out;
  auto x = W("deberta.embeddings.word_embeddings.weight").index_select(0, ids.reshape(-1)).view({B, L, -1});
  if (c.position_biased_input) x = x + W("deberta.embeddings.position_embeddings.weight").narrow(0, 0, L).unsqueeze(0);
  if (c.type_vocab_size > 0) {
    auto t = types.defined() ? types : torch::zeros_like(ids);
    x = x + W("deberta.embeddings.token_type_embeddings.weight").index_select(0, t.reshape(-1)).view({B, L, -1});
  }
  if (c.embedding_dim() != H) x = torch::matmul(x, W("deberta.embeddings.embed_proj.weight").t());
  x = ln(x, "deberta.embeddings.LayerNorm") * m.unsqueeze(-1);
  out.layers.push_back(x);

  // row(i, j) = clamp(i - j + max_rel, 0, 2 max_rel - 1)
  const int64_t max_rel = c.max_relative_positions >= 1 ? c.max_relative_positions : c.max_position_embeddings;
  auto pos = torch::arange(L, torch::kLong);
  auto row = torch::clamp(pos.unsqueeze(1) - pos.unsqueeze(0) + max_rel, 0, 2 * max_rel - 1);  // [L, L]
  const auto keep = (m.unsqueeze(2) * m.unsqueeze(1)).unsqueeze(1).gt(0);                     // [B, 1, L, L]
  for (int64_t n = 0; n < c.num_hidden_layers; ++n) {
    const std::string p = "deberta.encoder.layer." + std::to_string(n) + ".attention.self.";
    auto t = torch::matmul(x, W(p + "in_proj.weight").t()).view({B, L, h, 3 * d}).permute({0, 2, 1, 3});
    auto qkv = t.chunk(3, -1);
    auto q = qkv[0] + W(p + "q_bias").view({h, 1, d});
    auto k = qkv[1];
    auto v = qkv[2] + W(p + "v_bias").view({h, 1, d});
    q = q / s;
    auto S = torch::matmul(q, k.transpose(-1, -2));  // [B, h, L, L]
    if (c.relative_attention) {
      auto R = W("deberta.encoder.rel_embeddings.weight");  // [2 max_rel, H]
      auto per_head = [&](const torch::Tensor& P) { return P.view({2 * max_rel, h, d}).permute({1, 0, 2}); };
      auto index = row.expand({B, h, L, L});
      if (has("c2p")) {
        auto Pk = per_head(torch::matmul(R, W(p + "pos_proj.weight").t()));  // [h, 2mr, d]
        S = S + torch::gather(torch::matmul(q, Pk.transpose(-1, -2)), -1, index);
      }
      if (has("p2c")) {
        auto Pq = per_head((torch::matmul(R, W(p + "pos_q_proj.weight").t()) + W(p + "pos_q_proj.bias")) / s);
        auto kq = torch::matmul(k, Pq.transpose(-1, -2));  // [B, h, L(key j), 2mr]
        // p2c[i, j] = k_j . Pq[row(i, j)]
        S = S + torch::gather(kq, -1, index.transpose(-1, -2)).transpose(-1, -2);
      }
    }
    const bool talking = c.deberta_v1 && c.deberta_v1->talking_head;
    if (talking) S = torch::einsum("nm,bmij->bnij", {W(p + "head_logits_proj.weight"), S});
    S = S.masked_fill(keep.logical_not(), std::numeric_limits<float>::lowest());
    auto P = torch::softmax(S, -1);
    if (talking) P = torch::einsum("nm,bmij->bnij", {W(p + "head_weights_proj.weight"), P});
    if (n == 0) out.layer0_probs = P;
    auto ctx = torch::matmul(P, v).permute({0, 2, 1, 3}).reshape({B, L, H});
    const std::string l = "deberta.encoder.layer." + std::to_string(n);
    auto a = ln(lin(ctx, l + ".attention.output.dense") + x, l + ".attention.output.LayerNorm");
    x = ln(lin(torch::gelu(lin(a, l + ".intermediate.dense")), l + ".output.dense") + a, l + ".output.LayerNorm");
    out.layers.push_back(x);
  }
  if (w.count("classifier.weight")) {
    auto pooled = lin(x.select(1, 0), "pooler.dense");
    pooled = c.pooler_hidden_act == "gelu" ? torch::gelu(pooled) : torch::tanh(pooled);
    out.logits = lin(pooled, "classifier");
  }
  if (w.count("qa_outputs.weight")) {
    auto qa = lin(x, "qa_outputs");
    out.start = qa.select(-1, 0);
    out.end = qa.select(-1, 1);
  }
  return out;
}

}  // namespace dserve::v1test
