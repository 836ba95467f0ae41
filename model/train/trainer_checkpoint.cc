// The trainer's checkpoint I/O (trainer_impl.h): OUT/last and OUT/best
// (HF-compatible checkpoints), OUT/trainer_state (what --resume needs),
// written through a temp directory swapped in atomically; resuming from
// it, and cleaning up what an interrupted save left.
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "model/checkpoint/safetensors.h"
#include "model/deberta/torch_util.h"
#include "model/train/portable_random.h"
#include "model/train/trainer_impl.h"
#include "model/util/status_macros.h"

namespace dserve {
namespace trainer_internal {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string Trainer::StateDir() const { return (fs::path(o_.out_dir) / "trainer_state").string(); }

std::string RngState(const std::mt19937_64& rng) {
  std::ostringstream os;
  os << rng;
  return os.str();
}

absl::Status SetRngState(const std::string& state, std::mt19937_64* rng) {
  std::istringstream is(state);
  is >> *rng;
  if (is.fail()) return absl::InvalidArgumentError("trainer_state/state.json: bad data_rng state");
  return absl::OkStatus();
}

absl::Status WriteTextFile(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc | std::ios::binary);
    out << text;
    if (!out) return absl::InternalError(absl::StrCat(path, ": cannot write"));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return absl::InternalError(absl::StrCat(path, ": cannot rename"));
  return absl::OkStatus();
}

absl::Status FsyncPath(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return absl::InternalError(absl::StrCat(path, ": cannot open to fsync"));
  int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return absl::InternalError(absl::StrCat(path, ": fsync failed"));
  return absl::OkStatus();
}

absl::Status SwapInDirectory(const std::string& tmp, const std::string& dir) {
  std::error_code ec;
  if (!fs::exists(dir)) {
    if (std::rename(tmp.c_str(), dir.c_str()) != 0) return absl::InternalError(absl::StrCat(dir, ": rename failed"));
  } else if (syscall(SYS_renameat2, AT_FDCWD, tmp.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) == 0) {
    fs::remove_all(tmp, ec);
  } else {
    const std::string old = dir + ".old";
    fs::remove_all(old, ec);
    if (std::rename(dir.c_str(), old.c_str()) != 0) return absl::InternalError(absl::StrCat(dir, ": rename failed"));
    if (std::rename(tmp.c_str(), dir.c_str()) != 0) return absl::InternalError(absl::StrCat(dir, ": rename failed"));
    fs::remove_all(old, ec);
  }
  return FsyncPath(fs::path(dir).parent_path().string());
}

absl::Status Trainer::SaveCheckpoint(const std::string& dir, const json& metrics, std::optional<double> threshold) {
  ModelConfig c = config_;
  c.dserve.eval_metrics = metrics;
  c.dserve.training = TrainingSettings();
  c.dserve.training["step"] = step_;
  if (threshold) c.dserve.qa.null_score_diff_threshold = *threshold;
  return model_->Save(dir, c, tokenizer_src_, /*for_checkpoint=*/true, tokenizer_files_);
}

absl::Status Trainer::FinishInterruptedSave() {
  // A save writes trainer_state/ first, then last/: a kill between the two
  // leaves last/ one save behind the state this run resumes from. The
  // resumed weights are that step's, so last/ is rewritten from them.
  const fs::path last = fs::path(o_.out_dir) / "last";
  int64_t last_step = -1;
  std::ifstream in(last / "config.json");
  const json config = json::parse(in, nullptr, false);
  if (config.is_object()) {
    const json training = config.value("dserve", json::object()).value("training", json::object());
    if (training.contains("step") && training["step"].is_number_integer()) last_step = training["step"].get<int64_t>();
  }
  if (last_step == step_) return absl::OkStatus();
  log_->info("{} holds step {}, trainer_state/ step {} (a save was interrupted): rewriting it", last.string(),
             last_step, step_);
  return SaveCheckpoint(last.string(), last_eval_metrics_, last_threshold_);
}

absl::Status Trainer::SaveState() {
  const std::string dir = StateDir();
  const std::string tmp = dir + ".tmp";
  std::error_code ec;
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec) return absl::InternalError(absl::StrCat(tmp, ": cannot create: ", ec.message()));
  RETURN_IF_ERROR(WriteTextFile((fs::path(tmp) / "config.json").string(), config_.ToJson().dump(2)));
  TensorsForWrite w;
  RETURN_IF_ERROR(TorchCall("copying weights", [&] { w = ToWrite(model_->Named(/*for_checkpoint=*/false)); }));
  RETURN_IF_ERROR(WriteSafetensors((fs::path(tmp) / "model.safetensors").string(), w.tensors, {{"format", "pt"}}));
  const std::string optim = (fs::path(tmp) / "optimizer.pt").string();
  RETURN_IF_ERROR(TorchCall("saving optimizer state", [&] { torch::save(*optimizer_, optim); }));
  json state = {{"step", step_},
                {"epoch", epoch_},
                {"micro_in_epoch", micro_in_epoch_},
                {"data_rng_epoch_start", epoch_rng_state_},
                {"data_order", kDataOrderGenerator},
                {"best_metric", std::isfinite(best_metric_) ? json(best_metric_) : json(nullptr)},
                {"best_step", best_step_},
                {"evals_without_improvement", evals_without_improvement_},
                {"skipped_steps", skipped_steps_},
                {"last_eval_metrics", last_eval_metrics_},
                {"last_threshold", last_threshold_ ? json(*last_threshold_) : json(nullptr)},
                {"total_steps", total_steps_},
                {"world_size", comm_->world_size()},
                {"batch_size", o_.batch_size},
                {"grad_accum", o_.grad_accum},
                {"seed", o_.seed}};
  RETURN_IF_ERROR(WriteTextFile((fs::path(tmp) / "state.json").string(), state.dump(2)));
  for (const char* f : {"config.json", "model.safetensors", "optimizer.pt", "state.json"}) {
    RETURN_IF_ERROR(FsyncPath((fs::path(tmp) / f).string()));
  }
  RETURN_IF_ERROR(FsyncPath(tmp));
  return SwapInDirectory(tmp, dir);
}

void Trainer::RemoveStaleTemps() const {
  std::vector<fs::path> stale;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(o_.out_dir, ec)) {
    const std::string name = entry.path().filename().string();
    for (const char* target : {"last", "best"}) {
      // Without the target (a crash between the two renames of the
      // fallback swap) the temp dir may hold the only complete copy: kept.
      const bool target_in_place = fs::is_directory(fs::path(o_.out_dir) / target);
      if (target_in_place && (absl::StartsWith(name, absl::StrCat(target, ".tmp.")) ||
                              name == absl::StrCat(target, ".old"))) {
        stale.push_back(entry.path());
      }
    }
    // trainer_state.tmp is a save that never completed; trainer_state.old
    // the previous state of a fallback swap. Both are stale once a complete
    // trainer_state is in place (a kill during the final save left the tmp
    // behind, and the resume that found nothing left to do kept it).
    if ((name == "trainer_state.tmp" || name == "trainer_state.old") &&
        fs::exists(fs::path(StateDir()) / "state.json")) {
      stale.push_back(entry.path());
    }
  }
  for (const fs::path& path : stale) {
    fs::remove_all(path, ec);
    if (ec) {
      log_->warn("cannot remove {} (left by an interrupted save): {}", path.string(), ec.message());
    } else {
      log_->info("removed {} (left by an interrupted save)", path.string());
    }
  }
}

std::string Trainer::ResumeDirectory() const {
  if (!o_.resume) return "";
  const std::string state_dir = StateDir();
  if (fs::exists(fs::path(state_dir) / "state.json")) return state_dir;
  // A crash between the two renames of a save.
  if (fs::exists(fs::path(state_dir + ".old") / "state.json")) return state_dir + ".old";
  log_->warn("--resume: no {} yet; starting from the beginning", state_dir);
  return "";
}

absl::Status Trainer::LoadState(const std::string& resume_dir) {
  std::ifstream in(fs::path(resume_dir) / "state.json");
  json state = json::parse(in, nullptr, false);
  if (state.is_discarded() || !state.is_object()) return absl::DataLossError(absl::StrCat(resume_dir, "/state.json: invalid JSON"));
  try {
    step_ = state.at("step").get<int64_t>();
    epoch_ = state.at("epoch").get<int64_t>();
    micro_in_epoch_ = state.at("micro_in_epoch").get<int64_t>();
    epoch_rng_state_ = state.at("data_rng_epoch_start").get<std::string>();
    const std::string order = state.value("data_order", std::string("std::shuffle (before dserve recorded it)"));
    if (order != kDataOrderGenerator) {
      log_->warn("--resume: the saved run ordered its data with {}; this build uses {}: the rest of this epoch "
                 "sees a different order than the interrupted run would have",
                 order, kDataOrderGenerator);
    }
    best_metric_ = state.at("best_metric").is_null() ? -std::numeric_limits<double>::infinity()
                                                     : state.at("best_metric").get<double>();
    best_step_ = state.at("best_step").get<int64_t>();
    evals_without_improvement_ = state.at("evals_without_improvement").get<int64_t>();
    skipped_steps_ = state.value("skipped_steps", int64_t{0});
    last_eval_metrics_ = state.value("last_eval_metrics", json::object());
    if (state.contains("last_threshold") && !state["last_threshold"].is_null()) last_threshold_ = state["last_threshold"].get<double>();
    const int64_t world = state.value("world_size", 1), batch = state.value("batch_size", 0),
                  accum = state.value("grad_accum", 1);
    if (world != comm_->world_size() || batch != o_.batch_size || accum != o_.grad_accum) {
      log_->warn("--resume: the saved run used world {} x batch {} x accum {}; now {} x {} x {} (data order differs)",
                 world, batch, accum, comm_->world_size(), o_.batch_size, o_.grad_accum);
    }
  } catch (const json::exception& e) {
    return absl::DataLossError(absl::StrCat(resume_dir, "/state.json: ", e.what()));
  }
  RETURN_IF_ERROR(SetRngState(epoch_rng_state_, &data_rng_));
  return absl::OkStatus();
}

}  // namespace trainer_internal
}  // namespace dserve
