#include "model/train/batch_dump.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include <torch/torch.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "model/checkpoint/safetensors.h"
#include "model/deberta/torch_util.h"
#include "model/util/status_macros.h"

namespace dserve {
namespace {

namespace fs = std::filesystem;

// CPU contiguous copies (I64 or F32) and their TensorToWrite views.
absl::Status WriteTensors(const std::string& path, const std::vector<std::pair<std::string, torch::Tensor>>& named,
                          const std::map<std::string, std::string>& metadata) {
  std::vector<torch::Tensor> storage;
  std::vector<TensorToWrite> tensors;
  RETURN_IF_ERROR(TorchCall("copying tensors to dump", [&] {
    storage.reserve(named.size());
    for (const auto& [name, t] : named) {
      const bool integral = !c10::isFloatingType(t.scalar_type());
      storage.push_back(t.detach().to(torch::kCPU, integral ? torch::kLong : torch::kFloat).contiguous().clone());
      const torch::Tensor& s = storage.back();
      tensors.push_back(TensorToWrite{name, integral ? DType::kI64 : DType::kF32, s.sizes().vec(), s.data_ptr()});
    }
  }));
  return WriteSafetensors(path, tensors, metadata);
}

}  // namespace

absl::StatusOr<std::unique_ptr<BatchDump>> BatchDump::Create(
    const std::string& dir, const nlohmann::json& run,
    const std::vector<std::pair<std::string, torch::Tensor>>& params, int rank, int world_size) {
  std::error_code ec;
  if (rank != 0) {
    // Rank 0 checks and fills the directory; the others only add step files
    // (their first after step 1's all-reduce, when rank 0 is done here).
    fs::create_directories(dir, ec);
    if (ec) return absl::InvalidArgumentError(absl::StrCat("--dump-batches ", dir, ": cannot create: ", ec.message()));
    return std::unique_ptr<BatchDump>(new BatchDump(dir, rank, world_size));
  }
  if (fs::exists(dir, ec) && !fs::is_empty(dir, ec)) {
    return absl::InvalidArgumentError(absl::StrCat("--dump-batches ", dir, ": not empty (give a new directory)"));
  }
  fs::create_directories(dir, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat("--dump-batches ", dir, ": cannot create: ", ec.message()));
  {
    std::ofstream out(fs::path(dir) / "run.json", std::ios::trunc);
    out << run.dump(2) << "\n";
    if (!out) return absl::InternalError(absl::StrCat(dir, "/run.json: cannot write"));
  }
  RETURN_IF_ERROR(WriteTensors((fs::path(dir) / "initial.safetensors").string(), params, {{"format", "pt"}}));
  return std::unique_ptr<BatchDump>(new BatchDump(dir, rank, world_size));
}

void BatchDump::AddMicro(const std::vector<std::pair<std::string, torch::Tensor>>& tensors) {
  for (const auto& [name, t] : tensors) {
    pending_.emplace_back(absl::StrCat("m", micro_, ".", name), t.detach().clone());
  }
  ++micro_;
}

absl::Status BatchDump::FinishStep(int64_t step, nlohmann::json info) {
  info["step"] = step;
  info["rank"] = rank_;
  info["micro_batches"] = micro_;
  const std::string name = world_size_ > 1 ? absl::StrFormat("step_%06d.rank%d.safetensors", step, rank_)
                                           : absl::StrFormat("step_%06d.safetensors", step);
  const std::string path = (fs::path(dir_) / name).string();
  RETURN_IF_ERROR(WriteTensors(path, pending_, {{"format", "pt"}, {"dserve", info.dump()}}));
  pending_.clear();
  micro_ = 0;
  return absl::OkStatus();
}

}  // namespace dserve
