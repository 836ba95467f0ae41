#include "model/tools/train_command.h"

#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "model/train/distributed.h"

extern char** environ;

namespace dserve {
namespace {

int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 29500;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  int port = 29500;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

// argv without --nproc / --world-size / --rank / --master-* (and their values).
std::vector<std::string> StripDistributedArgs(const std::vector<std::string>& argv) {
  static const char* kFlags[] = {"--nproc", "--world-size", "--rank", "--master-addr", "--master-port"};
  std::vector<std::string> out;
  for (size_t i = 0; i < argv.size(); ++i) {
    bool skip = false;
    for (const char* f : kFlags) {
      if (argv[i] == f) {
        skip = true;
        ++i;  // its value
        break;
      }
      if (absl::StartsWith(argv[i], absl::StrCat(f, "="))) {
        skip = true;
        break;
      }
    }
    if (!skip) out.push_back(argv[i]);
  }
  return out;
}

int LaunchLocal(const TrainCommandOptions& options, std::ostream& err) {
  const int n = options.nproc;
  const int port = options.train.master_port > 0 && options.train.master_port != 29500 ? options.train.master_port
                                                                                        : FreePort();
  std::vector<std::string> base = StripDistributedArgs(options.argv);
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    std::vector<std::string> args = base;
    for (const std::string& a : {std::string("--world-size"), std::to_string(n), std::string("--rank"),
                                 std::to_string(r), std::string("--master-addr"), std::string("127.0.0.1"),
                                 std::string("--master-port"), std::to_string(port)}) {
      args.push_back(a);
    }
    std::vector<char*> cargs;
    for (auto& a : args) cargs.push_back(a.data());
    cargs.push_back(nullptr);
    pid_t pid = 0;
    if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, cargs.data(), environ) != 0) {
      err << "dserve train: cannot start rank " << r << "\n";
      for (pid_t p : pids) kill(p, SIGTERM);
      for (pid_t p : pids) waitpid(p, nullptr, 0);
      return 1;
    }
    pids.push_back(pid);
  }
  int rc = 0;
  size_t left = pids.size();
  while (left > 0) {
    int status = 0;
    pid_t done = waitpid(-1, &status, 0);
    if (done < 0) break;
    bool ours = false;
    for (pid_t& p : pids) {
      if (p == done) {
        p = -1;
        ours = true;
      }
    }
    if (!ours) continue;
    --left;
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    if (code != 0 && rc == 0) {
      rc = code;
      err << "dserve train: a rank exited with " << code << "; stopping the others\n";
      for (pid_t p : pids) {
        if (p > 0) kill(p, SIGTERM);
      }
    }
  }
  return rc;
}

}  // namespace

CLI::App* AddTrainCommand(CLI::App& app, TrainCommandOptions* options) {
  TrainOptions& t = options->train;
  auto* cmd = app.add_subcommand("train", "Train a classify / answer / rerank model (from scratch or --init)");
  cmd->add_option("--task", t.task, "mlm|classify|answer|rerank")->required();
  cmd->add_option("--train", t.train_path, "training data (DESIGN §4 format of the task)")->required();
  cmd->add_option("--eval", t.eval_path, "evaluation data; the best checkpoint is kept by its main metric");
  cmd->add_option("--test", t.test_path,
                  "test data, scored once at the end by OUT/best into OUT/test_metrics.json (never used to choose)");
  cmd->add_option("--init", t.init_dir, "start from this checkpoint directory (ours or Hugging Face's)");
  cmd->add_option("--config", t.config_path, "HF-style config.json of a model trained from scratch");
  cmd->add_option("--tokenizer", t.tokenizer_path, "spm.model (with --config; overrides --init's)");
  cmd->add_option("--out", t.out_dir, "output directory (best/, last/, trainer_state/, metrics.csv)")->required();
  cmd->add_option("--epochs", t.epochs, "passes over the training data")->capture_default_str();
  cmd->add_option("--max-steps", t.max_steps, "optimizer steps; 0 = no limit (whichever of the two ends first)")
      ->capture_default_str();
  cmd->add_option("--batch-size", t.batch_size, "units per rank per micro-batch")->capture_default_str();
  cmd->add_option("--grad-accum", t.grad_accum, "micro-batches per optimizer step")->capture_default_str();
  cmd->add_option("--lr", t.lr, "peak learning rate")->capture_default_str();
  cmd->add_option("--weight-decay", t.weight_decay, "AdamW decay (not on biases and LayerNorm weights)")
      ->capture_default_str();
  cmd->add_option("--warmup-ratio", t.warmup_ratio, "fraction of steps with linear warmup, then the --lr-schedule decay")
      ->capture_default_str();
  cmd->add_option("--layer-lr-decay", t.layer_lr_decay,
                  "layer-wise lr decay in (0, 1]: head lr, layer i of L lr x X^(L-i), embeddings lr x X^(L+1); 1 = off")
      ->capture_default_str();
  cmd->add_option("--lr-schedule", t.lr_schedule,
                  "after warmup: linear (decay to 0) or cosine (half a cosine to 0), as HF's schedules")
      ->capture_default_str();
  cmd->add_option("--max-grad-norm", t.max_grad_norm, "gradient clipping (0 = off)")->capture_default_str();
  cmd->add_option("--max-length", t.max_length, "tokens per sequence (0 = min(512, max_position_embeddings))")
      ->capture_default_str();
  cmd->add_option("--doc-stride", t.doc_stride, "answer: overlap of context windows in tokens")->capture_default_str();
  cmd->add_option("--seed", t.seed, "weights, data order and dropout")->capture_default_str();
  cmd->add_option("--save-every", t.save_every, "save trainer_state/ and last/ every N steps (0 = at the end)")
      ->capture_default_str();
  cmd->add_option("--eval-every", t.eval_every, "evaluate every N steps (0 = every epoch)")->capture_default_str();
  cmd->add_option("--eval-batch-size", t.eval_batch_size)->capture_default_str();
  cmd->add_option("--select-metric", t.select_metric,
                  "eval metric that picks OUT/best: classify accuracy|macro_f1, answer crossfit_f1|crossfit_exact|f1|"
                  "exact, rerank mrr@10|ndcg@10|map, mlm loss|perplexity|accuracy (default: the first)");
  cmd->add_option("--early-stopping", t.early_stopping, "stop after N evaluations without improvement (0 = off)")
      ->capture_default_str();
  cmd->add_option("--class-weights", t.class_weights,
                  "classify (single-label), skewed intents: balanced (N / (K x N_c)) or one weight per label in "
                  "the label order, e.g. 2,1,1; rescaled to a mean weight of 1 over the training set");
  cmd->add_flag("--resume", t.resume, "continue from OUT/trainer_state");
  cmd->add_flag("--listwise", t.listwise, "rerank: softmax over each query's candidates (a unit = one query)");
  cmd->add_flag("--bf16", t.bf16,
                "bfloat16 autocast for the training forwards (CPU): matmuls in bf16, fp32 master weights, "
                "LayerNorm/softmax/losses in fp32; evaluation stays fp32");
  cmd->add_flag("--gradient-checkpointing", t.gradient_checkpointing,
                "recompute each encoder layer's activations in backward instead of keeping them (long "
                "sequences; DeBERTa): same gradients, less memory, more compute");
  cmd->add_option("--objective", t.objective, "mlm: sop adds ALBERT's sentence-order prediction");
  cmd->add_flag("--span-masking", t.span_masking, "mlm: mask spans of up to 3 tokens");
  cmd->add_flag("--no-emd", t.no_emd, "mlm: no Enhanced Mask Decoder (ablation)");
  cmd->add_option("--mask-prob", t.mask_prob, "mlm: fraction of tokens selected")->capture_default_str();
  cmd->add_option("--problem-type", t.problem_type, "classify: multi_label_classification to force BCE");
  cmd->add_option("--dump-batches", t.dump_batches_dir,
                  "write DIR/run.json, DIR/initial.safetensors (weights before step 1) and one "
                  "DIR/step_NNNNNN.safetensors per step: each micro-batch's m<i>.input_ids, attention_mask, "
                  "token_type_ids, targets (labels | start_positions, end_positions | chunk_pair, targets, "
                  "pair_unit | mlm labels), and metadata \"dserve\" = JSON {loss, lr, grad_norm, units or "
                  "targets}; for the exact-loss oracle (docs/training.md); with several ranks step_NNNNNN.rank<R>.safetensors. "
                  "Not with --resume");
  cmd->add_option("--threads", t.threads, "intra-op threads per rank (0 = default)")->capture_default_str();
  cmd->add_option("--device", t.device, "cpu")->capture_default_str();
  cmd->add_option("--world-size", t.world_size, "ranks in the job (c10d Gloo)")->capture_default_str();
  cmd->add_option("--rank", t.rank, "this process's rank")->capture_default_str();
  cmd->add_option("--master-addr", t.master_addr, "rank 0's address (TCPStore)")->capture_default_str();
  cmd->add_option("--master-port", t.master_port, "rank 0's port")->capture_default_str();
  cmd->add_option("--nproc", options->nproc, "launch N local ranks on loopback");
  return cmd;
}

int RunTrainCommand(const TrainCommandOptions& options, std::ostream& err) {
  if (options.nproc > 0) {
    if (!DistributedAvailable() && options.nproc > 1) {
      err << "dserve train: --nproc needs c10d Gloo, which this build lacks (install libgloo-dev, re-run cmake)\n";
      return 2;
    }
    return LaunchLocal(options, err);
  }
  absl::Status status = Train(options.train);
  if (!status.ok()) {
    err << "dserve train: " << status.message() << "\n";
    // 2: bad options or input files (a corrupt --init checkpoint included,
    // as `serve`, `forward` and `eval` exit); 1: the run itself failed.
    return status.code() == absl::StatusCode::kInvalidArgument || status.code() == absl::StatusCode::kNotFound ||
                   status.code() == absl::StatusCode::kDataLoss || status.code() == absl::StatusCode::kUnimplemented
               ? 2
               : 1;
  }
  return 0;
}

}  // namespace dserve
