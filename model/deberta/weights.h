// WeightStore: tensors of one checkpoint looked up by their Hugging Face
// names. Lookups accept a name with or without the "deberta." scope (bare
// DebertaV2Model files have no prefix), convert to the requested dtype and
// device, and record what was used so the loader can report unused tensors.
#pragma once

#include <memory>
#include <set>
#include <string>
#include <vector>

#include <torch/types.h>

#include "absl/status/statusor.h"
#include "model/checkpoint/safetensors.h"

namespace dserve {

class WeightStore {
 public:
  // Takes ownership of the open files (one, or the shards of an index).
  WeightStore(std::vector<std::unique_ptr<SafetensorsFile>> files, torch::ScalarType dtype,
              torch::Device device);

  // Opens each path. Errors name the file.
  static absl::StatusOr<std::unique_ptr<WeightStore>> Open(const std::vector<std::string>& paths,
                                                           torch::ScalarType dtype,
                                                           torch::Device device);

  // The tensor called `name` (tries `name`, "deberta." + name, and name
  // without a leading "deberta."). NotFound names the tensor and file when
  // absent; InvalidArgument when its shape differs from `shape` (if given).
  absl::StatusOr<torch::Tensor> Get(const std::string& name,
                                    const std::vector<int64_t>& shape = {});
  // Like Get, but an absent tensor yields an undefined tensor.
  absl::StatusOr<torch::Tensor> GetOptional(const std::string& name,
                                            const std::vector<int64_t>& shape = {});
  bool Has(const std::string& name) const;

  // Names present in the files that no Get/GetOptional used.
  std::vector<std::string> Unused() const;
  std::vector<std::string> Names() const;
  torch::ScalarType dtype() const { return dtype_; }
  const torch::Device& device() const { return device_; }
  std::string Describe() const;  // file path(s), for messages

 private:
  const TensorView* Find(const std::string& name) const;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  torch::ScalarType dtype_;
  torch::Device device_;
  std::set<std::string> used_;
};

}  // namespace dserve
