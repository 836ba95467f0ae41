// `dserve forward`: runs a checkpoint on already-tokenized JSONL input and
// prints the raw head outputs (DESIGN §3). For debugging and parity checks.
#pragma once

#include <iosfwd>
#include <string>

namespace dserve {

struct ForwardCommandOptions {
  std::string model_dir;
  int batch_size = 8;        // lines padded and run together
  std::string dtype = "fp32";
  std::string device = "cpu";
  bool hidden = false;       // also print last_hidden_state (valid rows)
};

// stdin JSONL {"input_ids": [...], "token_type_ids": [...]?}; stdout JSONL in
// input order: {"logits": [...]} (classify/rerank) or {"start_logits": [...],
// "end_logits": [...]} (answer), plus "last_hidden_state" with `hidden`.
// Every line is validated before anything runs; a bad line is reported on
// `err` with its 1-based line number. Returns the process exit code:
// 0 ok, 1 bad input, 2 checkpoint cannot be loaded.
int RunForwardCommand(const ForwardCommandOptions& options, std::istream& in, std::ostream& out,
                      std::ostream& err);

}  // namespace dserve
