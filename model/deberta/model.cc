#include "model/deberta/model.h"

#include <chrono>

#include <torch/torch.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/checkpoint/checkpoint_dir.h"
#include "model/deberta/torch_util.h"
#include "model/deberta/weights.h"
#include "model/family/network.h"
#include "model/util/logging.h"
#include "model/util/status_macros.h"

namespace dserve {

struct DebertaModel::Impl {
  torch::ScalarType dtype = torch::kFloat;
  torch::Device device = torch::kCPU;
  std::unique_ptr<Network> network;  // the family's encoder + task head
};

DebertaModel::~DebertaModel() = default;

void ConfigureInferenceThread(int threads) {
  if (threads > 0) at::set_num_threads(threads);
}

TokenBatch TokenBatch::Pad(const std::vector<std::vector<int64_t>>& rows,
                           const std::vector<std::vector<int64_t>>& type_rows, int64_t pad_id) {
  TokenBatch batch;
  batch.batch_size = static_cast<int64_t>(rows.size());
  for (const auto& row : rows) batch.length = std::max<int64_t>(batch.length, row.size());
  const size_t n = static_cast<size_t>(batch.batch_size * batch.length);
  batch.input_ids.assign(n, pad_id);
  batch.attention_mask.assign(n, 0);
  if (!type_rows.empty()) batch.token_type_ids.assign(n, 0);
  for (size_t r = 0; r < rows.size(); ++r) {
    const size_t base = r * static_cast<size_t>(batch.length);
    for (size_t j = 0; j < rows[r].size(); ++j) {
      batch.input_ids[base + j] = rows[r][j];
      batch.attention_mask[base + j] = 1;
      if (!type_rows.empty() && j < type_rows[r].size()) batch.token_type_ids[base + j] = type_rows[r][j];
    }
  }
  return batch;
}

absl::StatusOr<std::shared_ptr<const DebertaModel>> DebertaModel::Load(const std::string& dir,
                                                                       const ModelOptions& options) {
  const auto started = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(CheckpointFiles files, ResolveCheckpoint(dir));
  ASSIGN_OR_RETURN(ModelConfig config, ModelConfig::FromFile(files.config));
  // int8: float32 weights, the family quantizes its dense layers at load.
  const bool int8 = options.dtype == "int8";
  auto parsed = ParseDType(int8 ? "fp32" : options.dtype);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("dtype: unknown value '", options.dtype, "' (expected fp32, bf16, fp16 or int8)"));
  }
  const torch::ScalarType dtype = *parsed;
  ASSIGN_OR_RETURN(torch::Device device, ParseDevice(options.device));
  if (int8 && !device.is_cpu()) {
    return absl::InvalidArgumentError(
        absl::StrCat("dtype int8 runs on the CPU only (device ", device.str(), "): use bf16 or fp16 on a GPU"));
  }
  ASSIGN_OR_RETURN(auto store, WeightStore::Open(files.weights, dtype, device));
  store->set_quantize_linear(int8);

  std::shared_ptr<DebertaModel> model(new DebertaModel());
  model->config_ = config;
  model->directory_ = dir;
  model->dtype_name_ = int8 ? "int8" : DTypeString(dtype);
  model->device_name_ = device.str();
  model->impl_ = std::make_unique<Impl>();
  model->impl_->dtype = dtype;
  model->impl_->device = device;

  const Task task = config.task();
  if (task != Task::kClassify && task != Task::kRerank && task != Task::kAnswer) {
    return absl::InvalidArgumentError(absl::StrCat(
        files.config, ": task '", TaskName(task), "' cannot be served; architectures [",
        absl::StrJoin(config.architectures, ", "),
        "] must name a ...ForSequenceClassification or ...ForQuestionAnswering model (or set dserve.task)"));
  }
  absl::Status status = absl::OkStatus();
  auto load = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(model->impl_->network, LoadNetwork(config, *store));
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(TorchCall(absl::StrCat("loading ", dir), [&] {
    torch::InferenceMode guard;
    status = load();
  }));
  if (!status.ok()) {
    return absl::Status(status.code(), absl::StrCat(dir, ": ", status.message()));
  }
  auto log = Logger("model");
  std::vector<std::string> unused = store->Unused();
  if (!unused.empty()) {
    log->debug("{}: ignoring {} unused tensors: {}", dir, unused.size(), absl::StrJoin(unused, ", "));
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  log->debug("loaded {} ({}, {} layers, hidden {}) as {} on {} in {:.2f}s", dir,
             TaskName(config.task()), config.num_hidden_layers, config.hidden_size,
             model->dtype_name_, model->device_name_, seconds);
  return std::shared_ptr<const DebertaModel>(std::move(model));
}

absl::StatusOr<HeadOutputs> DebertaModel::Run(const TokenBatch& batch, bool want_hidden) const {
  const int64_t B = batch.batch_size, L = batch.length;
  const size_t n = static_cast<size_t>(B * L);
  if (B <= 0 || L <= 0) return absl::InvalidArgumentError("empty batch");
  if (batch.input_ids.size() != n || batch.attention_mask.size() != n ||
      (!batch.token_type_ids.empty() && batch.token_type_ids.size() != n)) {
    return absl::InvalidArgumentError(absl::StrCat("batch: arrays do not match shape [", B, ", ", L, "]"));
  }
  if (config_.position_biased_input && L > config_.max_position_embeddings) {
    return absl::InvalidArgumentError(absl::StrCat("sequence length ", L, " exceeds max_position_embeddings (",
                                                   config_.max_position_embeddings, ")"));
  }
  for (size_t i = 0; i < n; ++i) {
    const int64_t id = batch.input_ids[i];
    if (id < 0 || id >= config_.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("token id ", id, " at row ", i / L, ", position ", i % L,
                                                     " is outside the vocabulary [0, ", config_.vocab_size, ")"));
    }
  }
  // A model without token types (type_vocab_size 0: DeBERTa v1 base/large,
  // v3) neither uses nor checks them, as Hugging Face does; the pair
  // encoding's 0/1 types still arrive.
  if (!batch.token_type_ids.empty() && config_.type_vocab_size > 0) {
    const int64_t types = config_.type_vocab_size;
    for (size_t i = 0; i < n; ++i) {
      if (batch.token_type_ids[i] < 0 || batch.token_type_ids[i] >= types) {
        return absl::InvalidArgumentError(absl::StrCat("token_type_id ", batch.token_type_ids[i], " at row ", i / L,
                                                       " is outside [0, ", types, ")"));
      }
    }
  }
  HeadOutputs out;
  out.batch_size = B;
  out.length = L;
  RETURN_IF_ERROR(TorchCall("forward", [&] {
    torch::InferenceMode guard;
    auto to_device = [&](const std::vector<int64_t>& v) {
      return torch::from_blob(const_cast<int64_t*>(v.data()), {B, L}, torch::kLong)
          .to(impl_->device, /*non_blocking=*/false, /*copy=*/true);
    };
    EncoderInput input;
    input.input_ids = to_device(batch.input_ids);
    input.attention_mask = to_device(batch.attention_mask);
    if (!batch.token_type_ids.empty() && config_.type_vocab_size > 0) {
      input.token_type_ids = to_device(batch.token_type_ids);
    }
    const NetworkOutputs net = impl_->network->Forward(input);
    const torch::Tensor& hidden = net.hidden;
    auto to_vector = [](const torch::Tensor& t) {
      auto cpu = t.to(torch::kCPU, torch::kFloat).contiguous();
      return std::vector<float>(cpu.data_ptr<float>(), cpu.data_ptr<float>() + cpu.numel());
    };
    if (net.logits.defined()) {
      out.num_labels = net.logits.size(1);
      out.logits = to_vector(net.logits);
    }
    if (net.start_logits.defined()) {
      out.start_logits = to_vector(net.start_logits);
      out.end_logits = to_vector(net.end_logits);
    }
    if (want_hidden) {
      out.hidden_size = hidden.size(2);
      out.hidden = to_vector(hidden);
    }
  }));
  return out;
}

}  // namespace dserve
