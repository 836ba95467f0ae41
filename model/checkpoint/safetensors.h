// safetensors files (https://huggingface.co/docs/safetensors): an 8-byte
// little-endian header length, a JSON header mapping tensor names to
// {dtype, shape, data_offsets} (plus an optional "__metadata__" string map),
// then the raw little-endian tensor bytes.
//
// The reader memory-maps the file (or takes its bytes: FromBytes) and
// validates the header completely before handing out any pointer: size
// limit, JSON syntax, known dtypes, shapes
// non-negative, byte range == element count x element size, ranges inside
// the data section and not overlapping. A corrupt file yields an error
// naming the file and the problem; it never crashes. Torch-free.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace dserve {

enum class DType { kF64, kF32, kF16, kBF16, kI64, kI32, kI16, kI8, kU8, kBool };

// "F32", "BF16", ... as the format spells them.
const char* DTypeName(DType dtype);
absl::StatusOr<DType> DTypeFromName(std::string_view name);
size_t DTypeSize(DType dtype);

// One tensor of an open file. `data` points into the mapping and stays valid
// as long as the SafetensorsFile lives. It is aligned to the element size when
// the file was written by this writer or by the reference implementation (both
// pad the header to a multiple of 8 and put larger elements first); a file
// from elsewhere may give an unaligned pointer, so copy (memcpy) rather than
// dereference typed pointers when in doubt.
struct TensorView {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  size_t num_bytes = 0;
  int64_t numel() const;
};

// A file of named tensors: safetensors (below) or a torch.save state_dict
// (pytorch_bin.h). Views stay valid as long as the file object lives;
// read-only, so safe to use from several threads.
class TensorFile {
 public:
  virtual ~TensorFile() = default;
  virtual const std::string& path() const = 0;
  // nullptr when absent.
  virtual const TensorView* Find(std::string_view name) const = 0;
  virtual const std::vector<TensorView>& tensors() const = 0;
};

class SafetensorsFile final : public TensorFile {
 public:
  struct Options {
    // Header larger than this is rejected (the format's reference
    // implementation uses 100 MB).
    size_t max_header_bytes = 100u << 20;
  };

  // Maps and validates `path`. Thread-safe to use concurrently afterwards
  // (read-only). Errors: NotFound (no such file), DataLoss (corrupt content;
  // the message names the path and, where one is at fault, the tensor),
  // InvalidArgument (not a regular file), Internal (mmap/stat failure).
  // Gaps between tensors are tolerated; overlaps are not.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path,
                                                               const Options& options);
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path) {
    return Open(path, Options());
  }
  // Validates a whole safetensors file held in memory, exactly as Open
  // validates a mapped one; `name` stands for the path in errors. The file
  // keeps `bytes` (views point into them). Errors: DataLoss, as Open.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> FromBytes(std::string name,
                                                                    std::string bytes,
                                                                    const Options& options);
  ~SafetensorsFile() override;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const override { return path_; }
  // nullptr when absent.
  const TensorView* Find(std::string_view name) const override;
  // In file order of data offsets.
  const std::vector<TensorView>& tensors() const override { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  SafetensorsFile() = default;
  // Validates `file_bytes` bytes at `base` (a whole file) and fills the
  // tensors, the index and the metadata with views into them.
  absl::Status Parse(const char* base, uint64_t file_bytes, const Options& options);
  std::string path_;
  void* mapping_ = nullptr;
  size_t mapping_bytes_ = 0;
  std::string bytes_;  // FromBytes: the file's bytes (Open maps instead)
  std::vector<TensorView> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
  std::map<std::string, std::string> metadata_;
};

// A tensor to write: `data` holds numel x DTypeSize(dtype) bytes, little-endian.
struct TensorToWrite {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  const void* data = nullptr;
};

// Writes a safetensors file atomically: a temporary file `path.tmp.XXXXXX` in
// the same directory, fsync, rename over `path`, fsync of the directory; on
// failure the temporary file is removed and `path` is untouched. Tensors are
// laid out contiguously in the given order, stably sorted by element size
// (largest first) so that each is aligned to its element size (the format
// forbids gaps, so this is the only way); for a single-dtype file that is the
// given order. The header is padded with spaces to a multiple of 8. Duplicate
// or empty names, "__metadata__" as a name, negative dimensions and null data
// for a non-empty tensor are InvalidArgument errors; I/O errors are Internal.
// Files load in Python's safetensors / transformers.
absl::Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                              const std::map<std::string, std::string>& metadata = {});

// fsync(2) on a directory, so that a rename inside it is durable.
absl::Status FsyncDirectory(const std::string& dir);

}  // namespace dserve
