// The pickles inside a `torch.save` file, read without Python or LibTorch:
// a small pickle machine (protocols 2-5, the opcodes a pickled state_dict
// uses) that understands exactly what torch.save puts in a state_dict:
// OrderedDict / dict, torch._utils._rebuild_tensor(_v2), _rebuild_parameter,
// and persistent storage ids ('storage', torch.<T>Storage, key, location,
// numel[, view]). Everything else becomes an opaque object, and an opaque
// object where a tensor belongs is an error naming the entry.
//
// Why not LibTorch's own unpickler (torch::pickle_load)? In 1.13 it turns
// collections.OrderedDict, the type of every `model.state_dict()`, into None
// ("Expected GenericDict but got None"; a plain dict works), rejects the
// SETITEM/APPEND opcodes Python writes for a batch of one ("Unknown opcode
// for unpickling at 0x73"), and has no legacy (non-zip) format ("failed
// finding central directory").
//
// The reader only describes tensors (storage key, offset, shape, strides);
// pytorch_bin.h fetches the storage bytes from the zip archive or the legacy
// file. Hostile input yields an error, never a crash: every read is bounds
// checked, stacks and memo are checked before use, and values are freed
// without recursion.
// Torch-free.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/checkpoint/safetensors.h"

namespace dserve {

// One storage as its persistent id declares it.
struct PickledStorage {
  DType dtype = DType::kF32;
  int64_t numel = 0;  // elements
};

// One entry of the state_dict.
struct PickledTensor {
  std::string name;
  std::string storage_key;     // zip: record "data/<key>"; legacy: the storage's key
  DType dtype = DType::kF32;   // the storage's element type
  int64_t storage_offset = 0;  // in elements (a legacy storage view's offset included)
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;  // in elements
};

struct StateDictPickle {
  std::vector<PickledTensor> tensors;  // in the pickle's order
  std::map<std::string, PickledStorage> storages;
};

// Parses the pickle at the start of `data` (up to its STOP; `*consumed`
// gets its length when not null) as a state_dict: a dict (or OrderedDict)
// whose keys are strings and whose values are tensors. Each tensor's
// elements are checked to lie inside its storage. InvalidArgument when the
// pickle is well formed but holds something else (the message says what:
// "a list", "entry 'x' is an int"), DataLoss when it is not a well-formed
// pickle (truncated, unknown opcode, bad memo reference, ...). Messages name
// no file: callers prefix it.
absl::StatusOr<StateDictPickle> ParseStateDictPickle(std::string_view data, size_t* consumed = nullptr);

// The legacy (pre-1.6, `_use_new_zipfile_serialization=False`) layout:
//   pickle(magic 0x1950a86a20f9469cfc6c) pickle(protocol 1001)
//   pickle(sys_info {little_endian, ...}) pickle(state_dict)
//   pickle([storage keys]) then per key: int64 numel, raw bytes.
// Parses the three header pickles; `*consumed` gets their total length.
// Errors: DataLoss (not this layout: no magic number, malformed pickles),
// FailedPrecondition (big-endian, or another protocol version).
absl::Status ParseLegacyHeader(std::string_view data, size_t* consumed);
// The pickled list of storage keys that follows the state_dict.
absl::StatusOr<std::vector<std::string>> ParseStorageKeyList(std::string_view data, size_t* consumed);

// Row-major contiguous strides of `shape`.
std::vector<int64_t> ContiguousStrides(const std::vector<int64_t>& shape);
// Copies the elements of `tensor` (element size `element_size`) from its
// storage bytes `storage` into `out`, row-major contiguous. The caller has
// checked the extent (ParseStateDictPickle does).
void GatherStrided(const PickledTensor& tensor, const char* storage, size_t element_size, std::string* out);

}  // namespace dserve
