// `dserve train`: fine-tuning / training from scratch of classify, answer,
// rerank and masked-LM (DebertaV2ForMaskedLM, with the Enhanced Mask Decoder) models (DESIGN §3), data-parallel over c10d Gloo when
// world_size > 1. Torch-free interface.
//
// Output directory layout (OUT = --out):
//   OUT/best/           the checkpoint to use: the best evaluation so far
//                       (by accuracy / F1 / mrr@10 / lowest MLM loss), or, without --eval, the
//                       final weights. A complete HF-compatible directory.
//   OUT/last/           the latest saved checkpoint (--save-every, and the end)
//   OUT/trainer_state/  what --resume needs: config.json, model.safetensors
//                       (every trained tensor), optimizer.pt (torch::save of
//                       AdamW), state.json (step, epoch, data-order RNG state,
//                       best metric, early-stopping count). Written atomically
//                       (temp dir + rename) every --save-every steps.
//   OUT/metrics.csv     one row per optimizer step: step, epoch, loss, lr,
//                       tokens_per_s, then eval_* columns on evaluation steps
//   OUT/distributed.json  (world_size > 1) the largest weight difference
//                       between ranks at the end (0 when in sync)
//
// Steps: an optimizer step takes grad_accum micro-batches of batch_size
// units per rank, so the global batch is batch_size x world_size x
// grad_accum units. The loss is the mean over the global batch's units
// (gradients are summed across ranks and divided by the global count), so
// N ranks with batch B compute the same step as 1 rank with batch N x B.
//
// Determinism: the data order of epoch e comes from an std::mt19937_64
// seeded with --seed (its state at the start of each epoch is saved); the
// torch generator (dropout) is reseeded at every micro-batch from (seed,
// rank, step, micro-batch), so a resumed run draws exactly the dropout
// masks an uninterrupted run would, on every rank, without saving each
// rank's generator.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace dserve {

struct TrainOptions {
  std::string task;        // classify | answer | rerank | mlm
  std::string train_path;  // --train
  std::string eval_path;   // --eval (optional)
  // --test (optional): scored once at the end by OUT/best as saved (its
  // threshold included), into OUT/test_metrics.json: data that neither
  // training nor checkpoint selection saw.
  std::string test_path;
  std::string init_dir;    // --init DIR (ours or Hugging Face's)
  std::string config_path; // --config config.json (from scratch)
  std::string tokenizer_path;  // --tokenizer spm.model (from scratch; overrides --init's)
  std::string out_dir;     // --out

  int epochs = 3;
  int max_steps = 0;        // 0 = no limit (epochs decide)
  int batch_size = 16;      // units per rank per micro-batch
  int grad_accum = 1;       // micro-batches per optimizer step
  double lr = 5e-5;
  double weight_decay = 0.01;
  double warmup_ratio = 0.0;  // fraction of the total steps with linear warmup
  // After warmup: "linear" decay to 0 (HF get_linear_schedule_with_warmup)
  // or "cosine" (HF get_cosine_schedule_with_warmup, half a cosine to 0).
  std::string lr_schedule = "linear";
  // Layer-wise learning-rate decay (DeBERTa/ELECTRA fine-tuning), in (0, 1];
  // 1 = off. The head (pooler, classifier, qa_outputs, MLM/SOP heads) gets
  // lr; encoder layer i of L gets lr x decay^(L - i); everything else of the
  // backbone (embeddings, the encoder's rel_embeddings, LayerNorm and conv)
  // gets lr x decay^(L + 1). Not for models that share their layers (ALBERT,
  // dserve.share_layers): one tensor would stand for every depth.
  double layer_lr_decay = 1.0;
  double max_grad_norm = 1.0; // 0 = no clipping
  double adam_eps = 1e-6;
  int max_length = 0;         // 0 = min(512, max_position_embeddings)
  int doc_stride = 128;       // answer / rerank windows (overlap in tokens)
  uint64_t seed = 42;
  int save_every = 0;         // 0 = only at the end
  int eval_every = 0;         // 0 = every epoch
  int eval_batch_size = 32;
  int early_stopping = 0;     // evaluations without improvement; 0 = off
  // --select-metric: the eval metric that picks OUT/best (and early
  // stopping). "" = the task's default: classify accuracy, answer
  // crossfit_f1, rerank mrr@10, mlm loss. Others: classify macro_f1; answer
  // f1, exact, crossfit_exact (f1/exact use a threshold tuned on the same
  // eval set: optimistic); rerank ndcg@10, map; mlm perplexity, accuracy.
  // loss and perplexity are minimised, the rest maximised.
  std::string select_metric;
  bool resume = false;
  bool listwise = false;      // rerank: softmax CE over a query's candidates
  // mlm (model/train/mlm.h): --objective sop adds ALBERT's sentence-order
  // prediction; --span-masking masks spans of up to 3 tokens; --no-emd
  // feeds the last encoder layer to the MLM head (no Enhanced Mask Decoder).
  std::string objective;      // "" (MLM only) or "sop"
  bool span_masking = false;
  bool no_emd = false;
  double mask_prob = 0.15;
  // Recompute each encoder layer's activations in backward instead of
  // keeping them (long sequences; DeBERTa): same gradients, less memory,
  // about a third more compute per step.
  bool gradient_checkpointing = false;
  bool bf16 = false;          // CPU autocast to bf16 for training forwards (model/deberta/autocast.h)
  std::string problem_type;   // classify: "" (from the data) or multi_label_classification
  // Single-label classify on skewed intents: "" (none), "balanced" (class c
  // weighs N / (K x N_c) over the training set, scikit-learn's rule) or one
  // weight per label in the label order ("2,1,1,0.5"). Weights are rescaled
  // so the training set's mean weight is 1, and the loss is
  // sum_i w(y_i) CE_i / N: the unbiased estimate of the class-weighted risk,
  // at the learning rate's usual scale.
  std::string class_weights;
  int threads = 0;            // intra-op threads (0 = torch's default / cores per rank)
  std::string device = "cpu";
  // --dump-batches DIR: every step's micro-batches, targets, normalisation
  // and loss, plus the initial weights (model/train/batch_dump.h), for the
  // exact-loss oracle. Not with --resume; each rank writes its own steps.
  std::string dump_batches_dir;

  // Distributed (c10d Gloo). world_size 1 = single process.
  int world_size = 1;
  int rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
};

// The learning-rate multiplier of the trained tensor `name` (HF names) under
// --layer-lr-decay `decay` for an encoder of `num_layers` layers (the rule
// above; 1 for every tensor when decay is 1).
double LayerLrMultiplier(const std::string& name, int64_t num_layers, double decay);

// Runs the whole training. Errors name the file / option at fault.
absl::Status Train(const TrainOptions& options);

}  // namespace dserve
