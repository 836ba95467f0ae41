#include "model/deberta/weights.h"

#include "absl/strings/match.h"
#include "model/checkpoint/pytorch_bin.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/deberta/torch_util.h"
#include "model/util/status_macros.h"

namespace dserve {
namespace {

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}
}  // namespace

WeightStore::WeightStore(std::vector<std::unique_ptr<TensorFile>> files,
                         torch::ScalarType dtype, torch::Device device)
    : files_(std::move(files)), dtype_(dtype), device_(device) {}

absl::StatusOr<std::unique_ptr<WeightStore>> WeightStore::Open(
    const std::vector<std::string>& paths, torch::ScalarType dtype, torch::Device device) {
  std::vector<std::unique_ptr<TensorFile>> files;
  for (const auto& path : paths) {
    if (absl::EndsWith(path, ".bin")) {
      ASSIGN_OR_RETURN(auto file, PytorchBinFile::Open(path));
      files.push_back(std::move(file));
    } else {
      ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(path));
      files.push_back(std::move(file));
    }
  }
  return std::make_unique<WeightStore>(std::move(files), dtype, device);
}

const TensorView* WeightStore::Find(const std::string& name) const {
  std::vector<std::string> candidates = {name};
  if (absl::StartsWith(name, scope_)) {
    candidates.push_back(name.substr(scope_.size()));
  } else {
    candidates.push_back(scope_ + name);
  }
  for (const auto& candidate : candidates) {
    for (const auto& file : files_) {
      if (const TensorView* view = file->Find(candidate)) return view;
    }
  }
  return nullptr;
}

bool WeightStore::Has(const std::string& name) const { return Find(name) != nullptr; }

absl::StatusOr<torch::Tensor> WeightStore::GetOptional(const std::string& name,
                                                       const std::vector<int64_t>& shape) {
  const TensorView* view = Find(name);
  if (view == nullptr) return torch::Tensor();
  used_.insert(view->name);
  if (!shape.empty() && view->shape != shape) {
    return absl::InvalidArgumentError(absl::StrCat(Describe(), ": tensor ", view->name, " has shape ",
                                                   ShapeString(view->shape), ", config expects ",
                                                   ShapeString(shape)));
  }
  return ToTensor(*view, dtype_, device_);
}

absl::StatusOr<torch::Tensor> WeightStore::Get(const std::string& name,
                                               const std::vector<int64_t>& shape) {
  ASSIGN_OR_RETURN(torch::Tensor tensor, GetOptional(name, shape));
  if (!tensor.defined()) {
    return absl::NotFoundError(
        absl::StrCat(Describe(), ": missing tensor ", name, " (also looked for it with and without the '",
                     scope_, "' prefix)"));
  }
  return tensor;
}

std::vector<std::string> WeightStore::Names() const {
  std::vector<std::string> names;
  for (const auto& file : files_) {
    for (const auto& view : file->tensors()) names.push_back(view.name);
  }
  return names;
}

std::vector<std::string> WeightStore::Unused() const {
  std::vector<std::string> unused;
  for (const auto& name : Names()) {
    if (!used_.count(name)) unused.push_back(name);
  }
  return unused;
}

absl::Status LoadLinear(WeightStore& store, const std::string& prefix, int64_t out, int64_t in,
                        LinearWeights* w) {
  ASSIGN_OR_RETURN(w->weight, store.Get(prefix + ".weight", {out, in}));
  ASSIGN_OR_RETURN(w->bias, store.Get(prefix + ".bias", {out}));
  return absl::OkStatus();
}

absl::Status LoadNorm(WeightStore& store, const std::string& prefix, int64_t size, NormWeights* w) {
  ASSIGN_OR_RETURN(w->weight, store.Get(prefix + ".weight", {size}));
  ASSIGN_OR_RETURN(w->bias, store.Get(prefix + ".bias", {size}));
  return absl::OkStatus();
}

std::string WeightStore::Describe() const {
  std::vector<std::string> paths;
  for (const auto& file : files_) paths.push_back(file->path());
  return absl::StrJoin(paths, ",");
}

}  // namespace dserve
