// WeightStore: tensors of one checkpoint looked up by their Hugging Face
// names. Lookups accept a name with or without the family's scope
// ("deberta." by default, "albert." for ALBERT; bare DebertaV2Model /
// AlbertModel files have no prefix), convert to the requested dtype and
// device, and record what was used so the loader can report unused tensors.
// The files are safetensors or torch.save state_dicts (pytorch_model.bin):
// the names, conversions and errors are the same for both.
#pragma once

#include <memory>
#include <set>
#include <string>
#include <vector>

#include <torch/types.h>

#include "absl/status/statusor.h"
#include "model/checkpoint/safetensors.h"
#include "model/family/network.h"

namespace dserve {

class WeightStore {
 public:
  // Takes ownership of the open files (one, or the shards of an index).
  WeightStore(std::vector<std::unique_ptr<TensorFile>> files, torch::ScalarType dtype,
              torch::Device device);

  // Opens each path: a ".bin" as a torch.save file (PytorchBinFile), any
  // other as safetensors. Errors name the file.
  static absl::StatusOr<std::unique_ptr<WeightStore>> Open(const std::vector<std::string>& paths,
                                                           torch::ScalarType dtype,
                                                           torch::Device device);

  // The scope tried with and without ("deberta." unless set; e.g. "albert.").
  void set_scope(std::string scope) { scope_ = std::move(scope); }

  // --dtype int8: the store hands out float32 tensors and the family that
  // loads from it quantizes its encoder's dense layers once at load
  // (DebertaEncoder::Options::int8_linear); a family that cannot refuses
  // with an error naming itself. Off by default.
  void set_quantize_linear(bool on) { quantize_linear_ = on; }
  bool quantize_linear() const { return quantize_linear_; }

  // The tensor called `name` (tries `name`, scope + name, and name
  // without a leading scope). NotFound names the tensor and file when
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
  std::vector<std::unique_ptr<TensorFile>> files_;
  torch::ScalarType dtype_;
  torch::Device device_;
  std::set<std::string> used_;
  std::string scope_ = "deberta.";
  bool quantize_linear_ = false;
};

// `prefix`.weight [out, in] and `prefix`.bias [out] (a Linear layer).
absl::Status LoadLinear(WeightStore& store, const std::string& prefix, int64_t out, int64_t in,
                        LinearWeights* w);
// `prefix`.weight and `prefix`.bias, both [size] (a LayerNorm).
absl::Status LoadNorm(WeightStore& store, const std::string& prefix, int64_t size, NormWeights* w);

}  // namespace dserve
