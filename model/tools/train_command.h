// `dserve train` and its CLI options (DESIGN §3; model/train/trainer.h has
// the behaviour). `--nproc N` runs N local ranks: this process re-executes
// itself N times with --world-size N --rank R --master-addr 127.0.0.1
// --master-port P (a free port unless given), waits for them, and stops the
// others when one fails.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "model/train/trainer.h"

namespace CLI {
class App;
}

namespace dserve {

struct TrainCommandOptions {
  TrainOptions train;
  int nproc = 0;  // > 0: launch this many local ranks
  // The process's own argv (for --nproc re-execution).
  std::vector<std::string> argv;
};

// Adds `train` to `app`; the options land in `options`.
CLI::App* AddTrainCommand(CLI::App& app, TrainCommandOptions* options);
// Returns the process exit code: 0 ok, 1 training failed, 2 bad options or
// unloadable inputs.
int RunTrainCommand(const TrainCommandOptions& options, std::ostream& err);

}  // namespace dserve
