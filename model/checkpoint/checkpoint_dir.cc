#include "model/checkpoint/checkpoint_dir.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "model/util/logging.h"
#include "model/util/status_macros.h"

namespace dserve {
namespace {

constexpr char kConfig[] = "config.json";
constexpr char kWeights[] = "model.safetensors";
constexpr char kWeightIndex[] = "model.safetensors.index.json";
constexpr char kPytorchBin[] = "pytorch_model.bin";  // torch.save's state_dict (pytorch_bin.h)
constexpr char kPytorchBinIndex[] = "pytorch_model.bin.index.json";
constexpr char kSpm[] = "spm.model";
constexpr char kTokenizerJson[] = "tokenizer.json";
constexpr char kAddedTokens[] = "added_tokens.json";
constexpr char kSpiece[] = "spiece.model";  // ALBERT's (and T5's) name for it
constexpr char kTrainingBest[] = "best";     // dserve train --out OUT writes OUT/best and OUT/last
constexpr char kTokenizerConfig[] = "tokenizer_config.json";

std::atomic<bool> use_rename_exchange{true};

std::string Errno() { return std::strerror(errno); }

std::string Join(const std::string& dir, const std::string& name) {
  if (!dir.empty() && dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

bool IsRegularFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool IsDirectory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

// A name that stays inside its directory.
bool IsPlainFileName(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

std::string StripTrailingSlashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

std::string ParentOf(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

void RemoveTree(const std::string& path) {
  std::error_code error;
  std::filesystem::remove_all(path, error);
  if (error) {
    Logger("checkpoint")->warn("cannot remove {}: {}", path, error.message());
  }
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::stringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": read error"));
  return buffer.str();
}

// Writes `content` to a new file and fsyncs it.
absl::Status WriteFileSynced(const std::string& path, const std::string& content) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return absl::InternalError(absl::StrCat(path, ": cannot create: ", Errno()));
  const char* p = content.data();
  size_t left = content.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      std::string error = Errno();
      ::close(fd);
      return absl::InternalError(absl::StrCat(path, ": cannot write: ", error));
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    std::string error = Errno();
    ::close(fd);
    return absl::InternalError(absl::StrCat(path, ": cannot fsync: ", error));
  }
  if (::close(fd) != 0) return absl::InternalError(absl::StrCat(path, ": cannot close: ", Errno()));
  return absl::OkStatus();
}

absl::Status ResolveShards(const std::string& dir, const char* index_name, CheckpointFiles* files) {
  const std::string& index_path = files->weight_index;
  ASSIGN_OR_RETURN(std::string text, ReadFile(index_path));
  nlohmann::json index;
  try {
    index = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(index_path, ": not valid JSON: ", e.what()));
  }
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(index_path, ": must hold an object with a \"weight_map\" object"));
  }
  std::set<std::string> shards;
  for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
    if (!it.value().is_string() || !IsPlainFileName(it.value().get<std::string>())) {
      return absl::InvalidArgumentError(
          absl::StrCat(index_path, ": weight_map entry for \"", it.key(),
                       "\" must be a file name in the same directory, got ", it.value().dump()));
    }
    const std::string shard = Join(dir, it.value().get<std::string>());
    shards.insert(shard);
    files->weight_map[it.key()] = shard;
  }
  if (shards.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(index_path, ": weight_map is empty"));
  }
  for (const std::string& shard : shards) {
    if (!IsRegularFile(shard)) {
      return absl::NotFoundError(absl::StrCat("checkpoint ", dir, ": shard ", shard,
                                              " listed in ", index_name, " is missing"));
    }
  }
  files->weights.assign(shards.begin(), shards.end());
  return absl::OkStatus();
}

absl::Status CopyTokenizer(const std::string& src, const std::string& dir) {
  const size_t slash = src.find_last_of('/');
  const std::string base = src.substr(slash + 1);  // npos + 1 == 0
  // A checkpoint's own name is kept (ALBERT's spiece.model, DeBERTa's
  // spm.model, tokenizer.json); any other file (--tokenizer PATH) becomes
  // spm.model.
  const char* name = base == kTokenizerJson ? kTokenizerJson : base == kSpiece ? kSpiece : kSpm;
  absl::StatusOr<std::string> content = ReadFile(src);
  if (!content.ok()) {
    return absl::NotFoundError(absl::StrCat("tokenizer ", src, ": cannot read"));
  }
  RETURN_IF_ERROR(WriteFileSynced(Join(dir, name), *content));
  // The text-rule flags (ALBERT's do_lower_case, keep_accents, ...) travel
  // with the vocabulary.
  const std::string src_config = Join(slash == std::string::npos ? "." : src.substr(0, slash), kTokenizerConfig);
  if (!IsRegularFile(src_config)) return absl::OkStatus();
  absl::StatusOr<std::string> flags = ReadFile(src_config);
  if (!flags.ok()) return absl::NotFoundError(absl::StrCat("tokenizer config ", src_config, ": cannot read"));
  return WriteFileSynced(Join(dir, kTokenizerConfig), *flags);
}

absl::Status CheckExtraFiles(const nlohmann::json& extra_files) {
  if (extra_files.is_null()) return absl::OkStatus();
  if (!extra_files.is_object()) {
    return absl::InvalidArgumentError("extra_files must be an object of file name -> JSON");
  }
  static const std::set<std::string> reserved = {kConfig, kWeights, kWeightIndex, kSpm,
                                                 kSpiece, kTokenizerJson, kTokenizerConfig};
  for (auto it = extra_files.begin(); it != extra_files.end(); ++it) {
    if (!IsPlainFileName(it.key()) || reserved.count(it.key()) > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("extra_files: \"", it.key(),
                       "\" is not allowed (a plain file name other than the checkpoint's own)"));
    }
  }
  return absl::OkStatus();
}

// Fills a fresh directory with every file of the checkpoint, each fsynced.
absl::Status WriteContents(const std::string& tmp, const ModelConfig& config,
                           const std::vector<TensorToWrite>& tensors,
                           const std::string& tokenizer_src, const nlohmann::json& extra_files,
                           const std::vector<std::string>& tokenizer_files) {
  RETURN_IF_ERROR(WriteFileSynced(Join(tmp, kConfig), config.ToJson().dump(2) + "\n"));
  RETURN_IF_ERROR(WriteSafetensors(Join(tmp, kWeights), tensors, {{"format", "pt"}}));
  if (!tokenizer_src.empty()) RETURN_IF_ERROR(CopyTokenizer(tokenizer_src, tmp));
  for (const std::string& src : tokenizer_files) {
    const std::string base = src.substr(src.find_last_of('/') + 1);  // npos + 1 == 0
    if (!IsPlainFileName(base) || base == kConfig || base == kWeights || base == kWeightIndex) {
      return absl::InvalidArgumentError(absl::StrCat("tokenizer file ", src, ": not a tokenizer file name"));
    }
    absl::StatusOr<std::string> content = ReadFile(src);
    if (!content.ok()) return absl::NotFoundError(absl::StrCat("tokenizer ", src, ": cannot read"));
    RETURN_IF_ERROR(WriteFileSynced(Join(tmp, base), *content));
  }
  if (extra_files.is_object()) {
    for (auto it = extra_files.begin(); it != extra_files.end(); ++it) {
      RETURN_IF_ERROR(WriteFileSynced(Join(tmp, it.key()), it.value().dump(2) + "\n"));
    }
  }
  return FsyncDirectory(tmp);
}

// Puts the complete directory `tmp` in place of the existing `target`.
absl::Status SwapIntoPlace(const std::string& tmp, const std::string& target,
                           const std::string& parent) {
  auto logger = Logger("checkpoint");
  if (use_rename_exchange.load()) {
    if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) == 0) {
      // `tmp` now holds the old checkpoint.
      RETURN_IF_ERROR(FsyncDirectory(parent));
      RemoveTree(tmp);
      return absl::OkStatus();
    }
    if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP) {
      return absl::InternalError(
          absl::StrCat(target, ": cannot exchange with ", tmp, ": ", Errno()));
    }
    logger->debug("RENAME_EXCHANGE unsupported for {}; renaming aside", target);
  }
  // An empty placeholder reserves a unique name; rename(2) may replace an
  // empty directory.
  std::string old = target + ".old.XXXXXX";
  if (::mkdtemp(old.data()) == nullptr) {
    return absl::InternalError(absl::StrCat(target, ": cannot create ", old, ": ", Errno()));
  }
  if (::rename(target.c_str(), old.c_str()) != 0) {
    std::string error = Errno();
    ::rmdir(old.c_str());
    return absl::InternalError(absl::StrCat(target, ": cannot move aside to ", old, ": ", error));
  }
  if (::rename(tmp.c_str(), target.c_str()) != 0) {
    std::string error = Errno();
    if (::rename(old.c_str(), target.c_str()) != 0) {
      logger->error("{}: could not restore the old checkpoint from {}: {}", target, old, Errno());
    }
    return absl::InternalError(absl::StrCat(target, ": cannot rename ", tmp, " into place: ", error));
  }
  RETURN_IF_ERROR(FsyncDirectory(parent));
  RemoveTree(old);
  return absl::OkStatus();
}

}  // namespace

namespace internal {
void SetUseRenameExchangeForTesting(bool enabled) { use_rename_exchange.store(enabled); }
}  // namespace internal

namespace {
// Says once per folder that a training output folder stands for its best/
// (ResolveCheckpoint runs on every hot-reload poll).
void AnnounceTrainingOutput(const std::string& dir, const std::string& best) {
  static absl::Mutex* mu = new absl::Mutex();
  static std::set<std::string>* announced = new std::set<std::string>();
  absl::MutexLock lock(mu);
  if (announced->insert(dir).second) {
    Logger("checkpoint")->info("{} is a dserve train output folder: using its best checkpoint, {}", dir, best);
  }
}
}  // namespace

absl::StatusOr<CheckpointFiles> ResolveCheckpoint(const std::string& dir) {
  if (!Exists(dir)) {
    return absl::NotFoundError(absl::StrCat("checkpoint directory ", dir, " does not exist"));
  }
  if (!IsDirectory(dir)) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint ", dir, " is not a directory"));
  }
  const std::string best = Join(dir, kTrainingBest);
  if (!IsRegularFile(Join(dir, kConfig)) && IsRegularFile(Join(best, kConfig))) {
    AnnounceTrainingOutput(dir, best);
    return ResolveCheckpoint(best);
  }
  CheckpointFiles files;
  files.dir = dir;
  files.config = Join(dir, kConfig);
  if (!IsRegularFile(files.config)) {
    return absl::NotFoundError(absl::StrCat("checkpoint ", dir, ": ", kConfig, " is missing"));
  }
  // safetensors first: it is mapped, not read, and holds no pickle.
  bool found = false;
  for (auto [single, index] : {std::pair{kWeights, kWeightIndex}, std::pair{kPytorchBin, kPytorchBinIndex}}) {
    if (IsRegularFile(Join(dir, single))) {
      files.weights.push_back(Join(dir, single));
    } else if (IsRegularFile(Join(dir, index))) {
      files.weight_index = Join(dir, index);
      RETURN_IF_ERROR(ResolveShards(dir, index, &files));
    } else {
      continue;
    }
    found = true;
    break;
  }
  if (!found) {
    return absl::NotFoundError(absl::StrCat("checkpoint ", dir, ": ", kWeights, " (or ", kWeightIndex, ", ",
                                            kPytorchBin, ", ", kPytorchBinIndex, ") is missing"));
  }
  if (IsRegularFile(Join(dir, kSpm))) {
    files.tokenizer_kind = TokenizerKind::kSentencePiece;
    files.tokenizer = Join(dir, kSpm);
  } else if (IsRegularFile(Join(dir, kSpiece))) {
    files.tokenizer_kind = TokenizerKind::kSentencePiece;
    files.tokenizer = Join(dir, kSpiece);
  } else if (IsRegularFile(Join(dir, kTokenizerJson))) {
    files.tokenizer_kind = TokenizerKind::kTokenizerJson;
    files.tokenizer = Join(dir, kTokenizerJson);
  }
  if (IsRegularFile(Join(dir, kAddedTokens))) files.added_tokens = Join(dir, kAddedTokens);
  if (IsRegularFile(Join(dir, kTokenizerConfig))) files.tokenizer_config = Join(dir, kTokenizerConfig);
  for (const char* name : {"vocab.json", "merges.txt", "special_tokens_map.json"}) {
    if (IsRegularFile(Join(dir, name))) files.bpe_files.push_back(Join(dir, name));
  }
  return files;
}

absl::Status WriteCheckpointDir(const std::string& dir, const ModelConfig& config,
                                const std::vector<TensorToWrite>& tensors,
                                const std::string& tokenizer_src,
                                const nlohmann::json& extra_files,
                                const std::vector<std::string>& tokenizer_files) {
  const std::string target = StripTrailingSlashes(dir);
  if (target.empty() || target == "/") {
    return absl::InvalidArgumentError(absl::StrCat("invalid checkpoint directory \"", dir, "\""));
  }
  {
    absl::Status valid = config.Validate();
    if (!valid.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint ", target, ": refusing to write an invalid config: ",
                       valid.message()));
    }
  }
  RETURN_IF_ERROR(CheckExtraFiles(extra_files));
  const std::string parent = ParentOf(target);
  if (!IsDirectory(parent)) {
    return absl::NotFoundError(
        absl::StrCat("checkpoint ", target, ": parent directory ", parent, " does not exist"));
  }
  if (Exists(target) && !IsDirectory(target)) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint ", target, " exists and is not a directory"));
  }
  std::string tmp = target + ".tmp.XXXXXX";
  if (::mkdtemp(tmp.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("checkpoint ", target, ": cannot create ", tmp, ": ",
                                            Errno()));
  }
  ::chmod(tmp.c_str(), 0755);  // mkdtemp makes it 0700
  absl::Status status = WriteContents(tmp, config, tensors, tokenizer_src, extra_files, tokenizer_files);
  if (status.ok()) {
    if (IsDirectory(target)) {
      status = SwapIntoPlace(tmp, target, parent);
    } else if (::rename(tmp.c_str(), target.c_str()) != 0) {
      status = absl::InternalError(
          absl::StrCat("checkpoint ", target, ": cannot rename ", tmp, " into place: ", Errno()));
    } else {
      status = FsyncDirectory(parent);
    }
  }
  if (!status.ok()) {
    if (Exists(tmp)) RemoveTree(tmp);
    return absl::Status(status.code(),
                        absl::StrCat("writing checkpoint ", target, ": ", status.message()));
  }
  Logger("checkpoint")->info("wrote checkpoint {} ({} tensors)", target, tensors.size());
  return absl::OkStatus();
}

}  // namespace dserve
