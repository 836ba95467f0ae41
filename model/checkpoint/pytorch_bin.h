// pytorch_model.bin: the state_dict of a `torch.save` file, as tensor views
// like a safetensors file's (so WeightStore, the HF name mapping and its
// errors are the same for both).
//
// Formats read:
//  - the zip archive torch.save writes since PyTorch 1.6 (`<archive>/data.pkl`
//    plus one record per storage, `<archive>/data/<key>`), through LibTorch's
//    zip reader (caffe2::serialize::PyTorchStreamReader);
//  - the legacy layout (`_use_new_zipfile_serialization=False`, and every
//    file saved before 1.6): header pickles, the state_dict pickle, the
//    storage key list, then each storage's bytes.
// The pickles go through torch_pickle.h (LibTorch's own unpickler cannot read
// an OrderedDict state_dict in 1.13; see there). Stored dtypes are kept
// (F32/F16/BF16/F64, integer and bool buffers); non-contiguous tensors
// (transposed views, offsets into a shared storage) are made contiguous;
// tensors that share a storage (tied weights) share its bytes.
//
// Unlike safetensors (memory-mapped), every storage is read into memory:
// loading peaks at about twice the weights (these bytes plus the model's
// copies, released after loading). `dserve convert` writes safetensors.
//
// Needs LibTorch (for the zip reader): built into dserve_model, not into the
// torch-free dserve_checkpoint.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "model/checkpoint/safetensors.h"

namespace dserve {

class PytorchBinFile final : public TensorFile {
 public:
  // Reads `path`. Every error names the path and the problem: NotFound (no
  // such file), DataLoss (truncated or corrupt archive or pickle, a storage
  // record missing or short, a tensor outside its storage), InvalidArgument
  // (a well-formed file that holds no state_dict: a list, a module, a dict
  // with a non-tensor entry; or an unsupported storage type),
  // FailedPrecondition (a legacy file saved big-endian).
  static absl::StatusOr<std::unique_ptr<PytorchBinFile>> Open(const std::string& path);

  const std::string& path() const override { return path_; }
  const TensorView* Find(std::string_view name) const override;
  // In the state_dict's order.
  const std::vector<TensorView>& tensors() const override { return tensors_; }
  // "zip" or "legacy".
  const std::string& format() const { return format_; }

 private:
  PytorchBinFile() = default;
  std::string path_;
  std::string format_;
  std::vector<TensorView> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
  std::vector<std::shared_ptr<void>> buffers_;  // the bytes the views point into
};

}  // namespace dserve
