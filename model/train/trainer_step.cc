// The trainer's optimisation step (trainer_impl.h): AdamW's parameter
// groups (weight decay x --layer-lr-decay), the learning-rate schedule,
// each micro-batch's share of the step's loss, the gradients' all-reduce
// across ranks, and what a non-finite gradient (skip) or loss (stop) does.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "model/deberta/torch_util.h"
#include "model/train/trainer_impl.h"
#include "model/util/status_macros.h"

namespace dserve {
namespace trainer_internal {

namespace fs = std::filesystem;
namespace F = torch::nn::functional;

namespace {

uint64_t SplitMix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

}  // namespace

uint64_t MixSeed(uint64_t seed, uint64_t a, uint64_t b, uint64_t c) {
  return SplitMix(SplitMix(SplitMix(SplitMix(seed) ^ a) ^ b) ^ c) & 0x7FFFFFFFFFFFFFFFULL;
}

absl::Status Trainer::SetClassWeights() {
  if (o_.class_weights.empty() || o_.class_weights == "none") return absl::OkStatus();
  if (config_.problem_type == "multi_label_classification") {
    return absl::InvalidArgumentError("--class-weights is for single-label classification (this data is multi-label)");
  }
  const std::vector<std::string> labels = config_.labels();
  const size_t k = labels.size();
  std::vector<double> count(k, 0.0);
  for (const Feature& f : train_.features) count[static_cast<size_t>(f.labels.front())] += 1;
  std::vector<double> w(k, 0.0);
  if (o_.class_weights == "balanced") {
    const double n = static_cast<double>(train_.features.size());
    for (size_t c = 0; c < k; ++c) w[c] = count[c] > 0 ? n / (static_cast<double>(k) * count[c]) : 0.0;
  } else {
    std::vector<std::string> parts = absl::StrSplit(o_.class_weights, ',');
    if (parts.size() != k) {
      return absl::InvalidArgumentError(absl::StrCat("--class-weights: ", parts.size(), " weights for ", k,
                                                     " labels (", absl::StrJoin(labels, ", "),
                                                     "); give one per label in this order, or \"balanced\""));
    }
    for (size_t c = 0; c < k; ++c) {
      if (!absl::SimpleAtod(parts[c], &w[c]) || !std::isfinite(w[c]) || w[c] < 0) {
        return absl::InvalidArgumentError(absl::StrCat("--class-weights: "", parts[c], "" (label ", labels[c],
                                                       ") is not a weight >= 0"));
      }
    }
  }
  double mean = 0;
  for (size_t c = 0; c < k; ++c) mean += w[c] * count[c];
  mean /= static_cast<double>(train_.features.size());
  if (!(mean > 0)) return absl::InvalidArgumentError("--class-weights: every training example weighs 0");
  std::vector<float> scaled(k);
  std::vector<std::string> shown;
  for (size_t c = 0; c < k; ++c) {
    scaled[c] = static_cast<float>(w[c] / mean);
    shown.push_back(absl::StrCat(labels[c], "=", absl::SixDigits(scaled[c])));
  }
  class_weights_ = torch::tensor(scaled, torch::kFloat);
  if (IsMain()) log_->info("--class-weights {}: {}", o_.class_weights, absl::StrJoin(shown, " "));
  return absl::OkStatus();
}

absl::Status Trainer::SetupOptimizer() {
  if (o_.layer_lr_decay < 1 && (config_.dserve.share_layers || config_.albert.has_value())) {
    return absl::InvalidArgumentError(
        "--layer-lr-decay: this model shares its encoder layers (ALBERT or dserve.share_layers), so a layer has no "
        "depth of its own; train it without --layer-lr-decay");
  }
  return TorchCall("creating the optimizer", [&] {
    // AdamW groups: (weight decay or not) x (--layer-lr-decay multiplier),
    // decayed before not decayed, then by multiplier from the head (1) down;
    // with --layer-lr-decay 1 exactly HF Trainer's two groups.
    std::map<std::pair<bool, double>, std::vector<torch::Tensor>, std::greater<>> by_group;
    for (auto& [name, p] : params_) {
      // HF's Trainer: no decay on biases and LayerNorm weights (ALBERT's
      // are also named "...layer_norm").
      // DeBERTa v1's q_bias / v_bias end in "_bias" (HF: "bias" in the name).
      const bool exclude = absl::EndsWith(name, ".bias") || absl::EndsWith(name, "_bias") ||
                           name.find("LayerNorm") != std::string::npos ||
                           name.find("layer_norm") != std::string::npos;
      if (exclude) no_decay_names_.push_back(name);
      by_group[{!exclude, LayerLrMultiplier(name, config_.num_hidden_layers, o_.layer_lr_decay)}].push_back(p);
    }
    std::vector<torch::optim::OptimizerParamGroup> groups;
    group_lr_multipliers_.clear();
    for (auto& [key, tensors] : by_group) {
      auto opts = std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(o_.lr * key.second)
                                                                   .betas({0.9, 0.999})
                                                                   .eps(o_.adam_eps)
                                                                   .weight_decay(key.first ? o_.weight_decay : 0.0));
      groups.emplace_back(tensors, std::move(opts));
      group_lr_multipliers_.push_back(key.second);
    }
    optimizer_ = std::make_unique<torch::optim::AdamW>(groups, torch::optim::AdamWOptions(o_.lr));
  });
}

double Trainer::LearningRate(int64_t step) const {
  // Hugging Face get_{linear,cosine}_schedule_with_warmup, step = optimizer
  // steps done.
  if (step < warmup_steps_) return o_.lr * static_cast<double>(step) / std::max<int64_t>(1, warmup_steps_);
  if (o_.lr_schedule == "cosine") {
    const double progress =
        static_cast<double>(step - warmup_steps_) / std::max<int64_t>(1, total_steps_ - warmup_steps_);
    return o_.lr * std::max(0.0, 0.5 * (1.0 + std::cos(M_PI * progress)));
  }
  const double rest = static_cast<double>(total_steps_ - step) / std::max<int64_t>(1, total_steps_ - warmup_steps_);
  return o_.lr * std::max(0.0, rest);
}

absl::StatusOr<MicroResult> Trainer::Micro(const std::vector<int>& units, double examples) {
  MicroResult r;
  torch::Tensor loss_sum;
  std::vector<int> indices;
  for (int u : units) {
    const auto& f = train_.units[static_cast<size_t>(u)];
    indices.insert(indices.end(), f.begin(), f.end());
  }
  TokenBatch batch = CollateFeatures(train_.features, indices, tokenizer_->pad_id(), config_.type_vocab_size > 0);
  for (int64_t m : batch.attention_mask) r.tokens += m;
  absl::Status status = TorchCall("training step", [&] {
    TrainableModel::Outputs out = model_->Forward(batch, /*training=*/true);
    const auto n = static_cast<int64_t>(indices.size());
    std::vector<std::pair<std::string, torch::Tensor>> dumped;  // --dump-batches: this micro-batch's targets
    switch (task_) {
      case Task::kClassify: {
        torch::Tensor logits = out.logits.to(torch::kFloat);
        if (config_.problem_type == "multi_label_classification") {
          torch::Tensor target = torch::zeros_like(logits);
          for (int64_t i = 0; i < n; ++i) {
            for (int l : train_.features[static_cast<size_t>(indices[i])].labels) target[i][l] = 1.0;
          }
          loss_sum = F::binary_cross_entropy_with_logits(
                           logits, target, F::BinaryCrossEntropyWithLogitsFuncOptions().reduction(torch::kNone))
                           .mean(1)
                           .sum();
          dumped.emplace_back("labels", target);
        } else {
          std::vector<int64_t> y;
          for (int i : indices) y.push_back(train_.features[static_cast<size_t>(i)].labels.front());
          torch::Tensor labels = torch::tensor(y, torch::kLong);
          auto options = F::CrossEntropyFuncOptions().reduction(torch::kSum);
          if (class_weights_.defined()) options.weight(class_weights_);
          loss_sum = F::cross_entropy(logits, labels, options);
          dumped.emplace_back("labels", labels);
        }
        break;
      }
      case Task::kAnswer: {
        torch::Tensor mask = torch::from_blob(batch.attention_mask.data(), {batch.batch_size, batch.length}, torch::kLong)
                                 .eq(0);
        auto masked = [&](const torch::Tensor& t) { return t.to(torch::kFloat).masked_fill(mask, -1e9); };
        std::vector<int64_t> s, e;
        for (int i : indices) {
          s.push_back(train_.features[static_cast<size_t>(i)].start);
          e.push_back(train_.features[static_cast<size_t>(i)].end);
        }
        auto sum = F::CrossEntropyFuncOptions().reduction(torch::kSum);
        torch::Tensor starts = torch::tensor(s, torch::kLong), ends = torch::tensor(e, torch::kLong);
        loss_sum = (F::cross_entropy(masked(out.start), starts, sum) + F::cross_entropy(masked(out.end), ends, sum)) / 2.0;
        dumped.emplace_back("start_positions", starts);
        dumped.emplace_back("end_positions", ends);
        break;
      }
      case Task::kRerank: {
        // One score per pair: the max over its chunks' logits, as the server
        // and eval pool them (issue 18, defect 6: train the way it serves).
        torch::Tensor chunk_logits = out.logits.to(torch::kFloat).select(1, 0);
        std::vector<torch::Tensor> pooled;
        std::vector<float> y;
        std::vector<int64_t> pairs_per_unit;
        std::vector<int64_t> chunk_pair, pair_unit;  // --dump-batches: the grouping
        int64_t row = 0;
        for (int u : units) {
          const auto& unit = train_.units[static_cast<size_t>(u)];
          int64_t pairs = 0;
          for (size_t k = 0; k < unit.size();) {
            const Feature& first = train_.features[static_cast<size_t>(unit[k])];
            size_t end = k + 1;
            while (end < unit.size() && train_.features[static_cast<size_t>(unit[end])].pair == first.pair) ++end;
            pooled.push_back(chunk_logits.narrow(0, row + static_cast<int64_t>(k), static_cast<int64_t>(end - k)).max());
            chunk_pair.insert(chunk_pair.end(), end - k, static_cast<int64_t>(y.size()));
            pair_unit.push_back(static_cast<int64_t>(pairs_per_unit.size()));
            y.push_back(first.target);
            ++pairs;
            k = end;
          }
          pairs_per_unit.push_back(pairs);
          row += static_cast<int64_t>(unit.size());
        }
        torch::Tensor logits = torch::stack(pooled);
        torch::Tensor target = torch::tensor(y, torch::kFloat);
        if (!o_.listwise) {
          loss_sum = F::binary_cross_entropy_with_logits(
              logits, target, F::BinaryCrossEntropyWithLogitsFuncOptions().reduction(torch::kSum));
        } else {
          // Softmax over each query's candidates; target uniform over its positives.
          torch::Tensor total = torch::zeros({}, torch::kFloat);
          int64_t offset = 0;
          for (int64_t k : pairs_per_unit) {
            torch::Tensor t = target.narrow(0, offset, k);
            const double positives = t.sum().item<double>();
            if (positives > 0) {
              total = total - (torch::log_softmax(logits.narrow(0, offset, k), 0) * t).sum() / positives;
            }
            offset += k;
          }
          loss_sum = total;
        }
        dumped.emplace_back("chunk_pair", torch::tensor(chunk_pair, torch::kLong));
        dumped.emplace_back("targets", target);
        dumped.emplace_back("pair_unit", torch::tensor(pair_unit, torch::kLong));
        break;
      }
      default:
        break;
    }
    r.objective = loss_sum / examples;
    if (dump_ != nullptr) {
      const int64_t B = batch.batch_size, L = batch.length;
      auto ids = [&](const std::vector<int64_t>& v) {
        return torch::from_blob(const_cast<int64_t*>(v.data()), {B, L}, torch::kLong).clone();
      };
      dumped.insert(dumped.begin(), {{"input_ids", ids(batch.input_ids)}, {"attention_mask", ids(batch.attention_mask)}});
      if (!batch.token_type_ids.empty() && config_.type_vocab_size > 0) {
        dumped.emplace_back("token_type_ids", ids(batch.token_type_ids));
      }
      dump_->AddMicro(dumped);
    }
  });
  RETURN_IF_ERROR(status);
  return r;
}

absl::StatusOr<MlmMicro> Trainer::MaskMicro(const std::vector<int>& units) {
  MlmMicro micro;
  micro.units = units;
  std::vector<MlmExample> part;
  MaskedTokens masked;
  const std::vector<int64_t> special_ids = MlmSpecialIds(*tokenizer_);
  absl::Status status = TorchCall("mlm masking", [&] {
    for (int u : units) {
      part.push_back(mlm_train_[static_cast<size_t>(u)]);
      micro.tokens += static_cast<int64_t>(part.back().input_ids.size());
      // Masks: a function of (seed, epoch, unit), like the data order.
      std::mt19937_64 rng(MixSeed(o_.seed ^ 0x6D6C6DULL, static_cast<uint64_t>(epoch_), static_cast<uint64_t>(u), 0));
      MaskedTokens one = MaskTokens({part.back().input_ids}, special_ids, tokenizer_->mask_id(), config_.vocab_size,
                                    masking_, rng);
      for (int64_t label : one.labels.front()) micro.targets += label >= 0 ? 1 : 0;
      if (sop_ && part.back().sop_label >= 0) ++micro.sop_examples;
      masked.input_ids.push_back(std::move(one.input_ids.front()));
      masked.labels.push_back(std::move(one.labels.front()));
    }
    micro.batch = CollateMlmBatch(part, masked, tokenizer_->pad_id(), torch::kCPU);
  });
  RETURN_IF_ERROR(status);
  return micro;
}

absl::StatusOr<MicroResult> Trainer::MicroMlm(const MlmMicro& micro, double targets, double sop_examples) {
  MicroResult r;
  r.tokens = micro.tokens;
  absl::Status status = TorchCall("mlm step", [&] {
    MlmOutput out = model_->Mlm(micro.batch, !o_.no_emd, /*training=*/true);
    if (dump_ != nullptr) {
      std::vector<std::pair<std::string, torch::Tensor>> dumped = {{"input_ids", micro.batch.input_ids},
                                                                  {"attention_mask", micro.batch.attention_mask},
                                                                  {"labels", micro.batch.labels}};
      if (micro.batch.token_type_ids.defined() && config_.type_vocab_size > 0) {
        dumped.emplace_back("token_type_ids", micro.batch.token_type_ids);
      }
      if (micro.batch.sop_labels.defined()) dumped.emplace_back("sop_labels", micro.batch.sop_labels);
      dump_->AddMicro(dumped);
    }
    // HF: mean cross-entropy over the masked tokens (+ the SOP mean); here
    // each micro-batch's sums over the whole step's counts.
    r.objective = targets > 0 ? out.mlm_loss * (static_cast<double>(out.count) / targets) : out.mlm_loss * 0.0;
    if (out.sop_loss.defined() && sop_examples > 0) {
      r.objective = r.objective + out.sop_loss * (static_cast<double>(out.sop_count) / sop_examples);
    }
  });
  RETURN_IF_ERROR(status);
  return r;
}

void Trainer::PoisonGradientsForTesting(int64_t step) {
  if (std::find(poison_steps_.begin(), poison_steps_.end(), step) == poison_steps_.end()) return;
  params_.front().second.mutable_grad().fill_(std::numeric_limits<double>::quiet_NaN());
}

absl::Status Trainer::NonFinite(const std::string& what, double value) const {
  const std::string kept =
      saved_step_ >= 0
          ? absl::StrCat("the last checkpoint (", (fs::path(o_.out_dir) / "last").string(), " and trainer_state/, step ",
                         saved_step_, ") is kept as it was")
          : fs::is_directory(fs::path(o_.out_dir) / "last")
                ? absl::StrCat("this run saved nothing before it; ", (fs::path(o_.out_dir) / "last").string(),
                               " (from an earlier run) is untouched")
                : std::string("no checkpoint was saved before it");
  return absl::InternalError(absl::StrCat(what, " is ", value, " at step ", step_ + 1, ": training stopped; ", kept,
                                          ". Lower --lr (now ", o_.lr,
                                          ") or check the data and the --init weights for NaN/Inf"));
}

absl::Status Trainer::ReduceGradients(double local_loss, int64_t local_tokens, double* loss, double* tokens) {
  *loss = local_loss;
  *tokens = static_cast<double>(local_tokens);
  RETURN_IF_ERROR(TorchCall("gradients", [&] {
    for (auto& [n, p] : params_) {
      if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
    }
  }));
  if (comm_->world_size() > 1) {
    torch::Tensor flat, stats;
    RETURN_IF_ERROR(TorchCall("flattening gradients", [&] {
      std::vector<torch::Tensor> parts;
      for (auto& [n, p] : params_) parts.push_back(p.grad().reshape(-1));
      flat = torch::cat(parts);
      stats = torch::tensor({local_loss, static_cast<double>(local_tokens)}, torch::kDouble);
    }));
    std::vector<torch::Tensor> reduce{flat, stats};
    RETURN_IF_ERROR(comm_->AllReduceSum(reduce));
    RETURN_IF_ERROR(TorchCall("unflattening gradients", [&] {
      int64_t offset = 0;
      for (auto& [n, p] : params_) {
        p.grad().copy_(flat.narrow(0, offset, p.numel()).view_as(p));
        offset += p.numel();
      }
      *loss = stats[0].item<double>();
      *tokens = stats[1].item<double>();
    }));
  }
  return absl::OkStatus();
}

absl::Status Trainer::OptimizerStep(double lr, double* grad_norm) {
  return TorchCall("optimizer step", [&] {
    PoisonGradientsForTesting(step_ + 1);
    std::vector<torch::Tensor> grads;
    for (auto& [n, p] : params_) grads.push_back(p.grad().detach().norm(2));
    *grad_norm = torch::stack(grads).norm(2).item<double>();
    if (!std::isfinite(*grad_norm)) return;
    if (o_.max_grad_norm > 0) {
      std::vector<torch::Tensor> ps;
      for (auto& [n, p] : params_) ps.push_back(p);
      torch::nn::utils::clip_grad_norm_(ps, o_.max_grad_norm);
    }
    auto& param_groups = optimizer_->param_groups();
    for (size_t g = 0; g < param_groups.size(); ++g) {
      static_cast<torch::optim::AdamWOptions&>(param_groups[g].options()).lr(lr * group_lr_multipliers_[g]);
    }
    optimizer_->step();
  });
}

}  // namespace trainer_internal

double LayerLrMultiplier(const std::string& name, int64_t num_layers, double decay) {
  if (decay == 1.0) return 1.0;
  // The backbone's tensors are "<model>.<...>" (deberta., albert.); the
  // heads' are not (pooler., classifier., qa_outputs., lm_predictions., ...).
  const size_t dot = name.find('.');
  const std::string model = dot == std::string::npos ? "" : name.substr(0, dot);
  if (model != "deberta" && model != "albert") return 1.0;
  const std::string layer_prefix = model + ".encoder.layer.";
  int64_t layer = -1;
  if (absl::StartsWith(name, layer_prefix)) {
    const std::string rest = name.substr(layer_prefix.size());
    if (!absl::SimpleAtoi(rest.substr(0, rest.find('.')), &layer)) layer = -1;
  }
  // The rest of the backbone (embeddings, the encoder's rel_embeddings,
  // LayerNorm and conv) goes with the embeddings: one step below layer 0.
  const int64_t depth = layer >= 0 ? num_layers - layer : num_layers + 1;
  return std::pow(decay, static_cast<double>(depth));
}

}  // namespace dserve
