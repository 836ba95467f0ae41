// DebertaModel: a loaded checkpoint (config + encoder + task head), ready to
// run batches, of any model family (DeBERTa-v2/v3, ALBERT: model/family/
// network.h picks the family by config.json's model_type; the name predates
// the second family). Torch-free interface so that server code can hold and
// call it without including LibTorch.
//
// Thread safety: immutable after Load(); Run() is const and may be called
// from several worker threads at once on the same instance (weights are
// shared, never copied per worker).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/checkpoint/model_config.h"

namespace dserve {

struct ModelOptions {
  // fp32 | bf16 | fp16 (weights and compute), or int8: the encoder's dense
  // layers in int8 (dynamic quantization, CPU only, docs/models.md "--dtype"),
  // everything else in fp32.
  std::string dtype = "fp32";
  std::string device = "cpu";   // auto | cpu | cuda | cuda:N
};

// A padded batch of token ids, row-major [batch_size, length].
struct TokenBatch {
  int64_t batch_size = 0;
  int64_t length = 0;
  std::vector<int64_t> input_ids;
  std::vector<int64_t> attention_mask;  // 1 real, 0 padding
  std::vector<int64_t> token_type_ids;  // empty = all zero

  // Pads `rows` (each already with specials) on the right with `pad_id`.
  static TokenBatch Pad(const std::vector<std::vector<int64_t>>& rows,
                        const std::vector<std::vector<int64_t>>& type_rows, int64_t pad_id);
};

// Raw head outputs as float32, row-major.
struct HeadOutputs {
  int64_t batch_size = 0;
  int64_t length = 0;
  int64_t num_labels = 0;
  std::vector<float> logits;        // [B, num_labels] (classify, rerank)
  std::vector<float> start_logits;  // [B, L] (answer)
  std::vector<float> end_logits;    // [B, L] (answer)
  std::vector<float> hidden;        // [B, L, H] when requested
  int64_t hidden_size = 0;
};

// Sets the calling thread up for inference: `threads` intra-op threads on
// CPU (0 = leave torch's default). Call once at the start of each worker
// thread; OpenMP's thread count is per calling thread.
void ConfigureInferenceThread(int threads);

class DebertaModel {
 public:
  // Loads `dir` (config.json, model.safetensors or a sharded index). Errors
  // name the file and the problem (missing tensor, wrong shape, bad config).
  static absl::StatusOr<std::shared_ptr<const DebertaModel>> Load(const std::string& dir,
                                                                  const ModelOptions& options);
  ~DebertaModel();

  // Validates the batch (shape, ids < vocab_size, length allowed with
  // absolute positions) and runs encoder + head under InferenceMode.
  absl::StatusOr<HeadOutputs> Run(const TokenBatch& batch, bool want_hidden = false) const;

  const ModelConfig& config() const { return config_; }
  Task task() const { return config_.task(); }
  const std::string& directory() const { return directory_; }
  const std::string& dtype() const { return dtype_name_; }
  const std::string& device() const { return device_name_; }
  // Longest input accepted: max_position_embeddings with absolute positions,
  // else dserve.max_length or max_position_embeddings (what serving uses).
  int64_t max_length() const { return config_.max_sequence_length(); }

 private:
  struct Impl;
  DebertaModel() = default;
  ModelConfig config_;
  std::string directory_;
  std::string dtype_name_;
  std::string device_name_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dserve
