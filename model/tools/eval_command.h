// `dserve eval --model DIR --data FILE [--predictions OUT]` (DESIGN §3, §4):
// loads the checkpoint as the server does (DebertaModel::Load), evaluates
// FILE in the format of the checkpoint's task and prints ONE JSON object of
// metrics on stdout (model/train/evaluate.h lists them), with
// latency_p50_ms, latency_p99_ms, items_per_s, items and peak_rss_bytes.
#pragma once

#include <ostream>
#include <string>

namespace CLI {
class App;
}

namespace dserve {

struct EvalCommandOptions {
  std::string model_dir;
  std::string data;
  std::string predictions;  // optional output file
  int batch_size = 16;      // sequences per forward (per-item latency is its batch's)
  int max_length = 0;       // 0 = the checkpoint's dserve.max_length
  std::string dtype = "fp32";
  std::string device = "cpu";
  int threads = 0;
};

CLI::App* AddEvalCommand(CLI::App& app, EvalCommandOptions* options);
// 0 ok, 1 evaluation failed (bad data), 2 the checkpoint cannot be loaded.
int RunEvalCommand(const EvalCommandOptions& options, std::ostream& out, std::ostream& err);

}  // namespace dserve
