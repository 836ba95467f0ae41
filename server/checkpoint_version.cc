#include "server/checkpoint_version.h"

#include <sys/stat.h>

#include <cstdint>
#include <fstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "model/checkpoint/checkpoint_dir.h"
#include "model/util/status_macros.h"

namespace dserve {
namespace {

class Fnv1a {
 public:
  void Add(const char* data, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      hash_ ^= static_cast<unsigned char>(data[i]);
      hash_ *= 1099511628211ull;
    }
  }
  void Add(const std::string& s) { Add(s.data(), s.size()); }
  uint64_t value() const { return hash_; }

 private:
  uint64_t hash_ = 14695981039346656037ull;
};

absl::Status HashFile(const std::string& path, bool whole, Fnv1a* hash) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  const int64_t size = in.tellg();
  hash->Add(std::to_string(size));
  std::vector<char> block(64 << 10);
  auto read_at = [&](int64_t offset, size_t n) {
    in.seekg(offset);
    in.read(block.data(), static_cast<std::streamsize>(n));
    hash->Add(block.data(), static_cast<size_t>(in.gcount()));
  };
  if (whole || size <= static_cast<int64_t>(block.size()) * 16) {
    for (int64_t off = 0; off < size; off += static_cast<int64_t>(block.size())) read_at(off, block.size());
    return absl::OkStatus();
  }
  for (int i = 0; i < 16; ++i) read_at(size / 16 * i, block.size());
  read_at(size - static_cast<int64_t>(block.size()), block.size());
  return absl::OkStatus();
}

std::string FileStamp(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return absl::StrCat(path, ":missing");
  return absl::StrCat(path, ":", st.st_ino, ":", st.st_size, ":", st.st_mtim.tv_sec, ".", st.st_mtim.tv_nsec);
}

}  // namespace

absl::StatusOr<std::string> CheckpointVersion(const std::string& dir) {
  ASSIGN_OR_RETURN(CheckpointFiles files, ResolveCheckpoint(dir));
  Fnv1a hash;
  RETURN_IF_ERROR(HashFile(files.config, /*whole=*/true, &hash));
  for (const auto& w : files.weights) RETURN_IF_ERROR(HashFile(w, /*whole=*/false, &hash));
  for (const std::string& f : {files.tokenizer, files.added_tokens}) {
    hash.Add(f.empty() ? std::string("-") : f.substr(files.dir.size()));
    if (!f.empty()) RETURN_IF_ERROR(HashFile(f, /*whole=*/false, &hash));
  }
  // DeBERTa v1's BPE files; absent (every other family), versions stay as they were.
  for (const std::string& f : files.bpe_files) {
    hash.Add(f.substr(files.dir.size()));
    RETURN_IF_ERROR(HashFile(f, /*whole=*/true, &hash));
  }
  // Its flags change tokenization (ALBERT); absent, versions stay as they were.
  if (!files.tokenizer_config.empty()) {
    hash.Add(files.tokenizer_config.substr(files.dir.size()));
    RETURN_IF_ERROR(HashFile(files.tokenizer_config, /*whole=*/true, &hash));
  }
  return absl::StrFormat("%016x", hash.value());
}

std::string CheckpointFingerprint(const std::string& dir) {
  auto files = ResolveCheckpoint(dir);
  if (!files.ok()) return absl::StrCat("!", files.status().message());
  auto version = CheckpointVersion(dir);
  if (!version.ok()) return absl::StrCat("!", version.status().message());
  std::string out = *version;
  for (const std::string& f : {files->config, files->tokenizer, files->added_tokens, files->tokenizer_config,
                                files->weight_index}) {
    if (!f.empty()) absl::StrAppend(&out, "|", FileStamp(f));
  }
  for (const auto& w : files->weights) absl::StrAppend(&out, "|", FileStamp(w));
  for (const auto& f : files->bpe_files) absl::StrAppend(&out, "|", FileStamp(f));
  return out;
}

}  // namespace dserve
