// `dserve train --dump-batches DIR` (issue 18, exact-loss oracle): writes
// what the trainer fed the model at every optimizer step, and the loss it
// computed, so that an independent training loop (tests/oracle/) can replay
// the run and compare losses step by step.
//
// Layout of DIR (all safetensors files little-endian, readable with a few
// lines of Python: an 8-byte header length, a JSON header, raw data):
//   run.json              the run: "task", "config" (the model's config.json,
//                         as trained), "optimizer" {lr, weight_decay, betas,
//                         eps, max_grad_norm, warmup_steps, total_steps,
//                         warmup_ratio, lr_schedule "linear"|"cosine",
//                         layer_lr_decay}, "grad_accum", "batch_size",
//                         "listwise", "emd", "params" (trained tensor names in
//                         optimizer order), "no_decay" (names without weight
//                         decay), "lr_multipliers" {name: --layer-lr-decay
//                         factor of its lr}, "world_size", "format" (this
//                         layout's version, 1)
//   initial.safetensors   every trained tensor (F32, HF names) before step 1
//   step_NNNNNN.safetensors  one per optimizer step (1-based, 6 digits);
//                         with world_size > 1 one per step and rank,
//                         step_NNNNNN.rank<R>.safetensors, each holding that
//                         rank's micro-batches (the step is all of them):
//     tensors m<i>.<name> for micro-batch i = 0, 1, ... of the step:
//       input_ids, attention_mask [b, L] I64 (token_type_ids [b, L] I64 when
//       the model has token types)
//       classify:  labels [b] I64, or (multi-label) labels [b, C] F32 multi-hot
//       answer:    start_positions, end_positions [b] I64 (0 = [CLS])
//       rerank:    chunk_pair [b] I64 (row -> pair index within the
//                  micro-batch; a pair's score is the max over its rows),
//                  targets [pairs] F32, pair_unit [pairs] I64 (pair -> unit
//                  index within the micro-batch; listwise softmax groups)
//       mlm:       labels [b, L] I64 (original id at targets, -100 elsewhere),
//                  sop_labels [b] I64 (with --objective sop)
//     metadata key "dserve" (JSON): step, rank, loss (what dserve computed
//     and logged: the step's mean over the global batch), lr (this step's),
//     grad_norm (before clipping), micro_batches, and the step's
//     normalisation over every rank: "units" (classify/answer/rerank: the
//     loss sum is divided by it) or "targets" and "sop_examples" (mlm).
//
// Not with --resume: the dump starts at step 0 from the initial weights.
// With several ranks every rank writes its own step files into the same
// DIR; rank 0 also writes run.json and initial.safetensors (the weights
// every rank starts from, after the broadcast).
//
// Not thread-safe: the training loop owns it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/types.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace dserve {

class BatchDump {
 public:
  // Creates `dir`; rank 0 requires it empty (or absent) and writes run.json
  // and initial.safetensors from `params` (name, tensor).
  static absl::StatusOr<std::unique_ptr<BatchDump>> Create(
      const std::string& dir, const nlohmann::json& run,
      const std::vector<std::pair<std::string, torch::Tensor>>& params, int rank, int world_size);

  // Adds one micro-batch of the current step: tensors (int64 ones stay I64,
  // floating ones become F32), copied now.
  void AddMicro(const std::vector<std::pair<std::string, torch::Tensor>>& tensors);

  // Writes the current step's file with `info` (plus step, micro_batches)
  // as its "dserve" metadata, and starts the next step.
  absl::Status FinishStep(int64_t step, nlohmann::json info);

 private:
  BatchDump(std::string dir, int rank, int world_size)
      : dir_(std::move(dir)), rank_(rank), world_size_(world_size) {}
  std::string dir_;
  int rank_ = 0;
  int world_size_ = 1;
  int micro_ = 0;
  std::vector<std::pair<std::string, torch::Tensor>> pending_;
};

}  // namespace dserve
