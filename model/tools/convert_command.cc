#include "model/tools/convert_command.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <filesystem>
#include <map>
#include <memory>
#include <ostream>
#include <set>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "model/checkpoint/checkpoint_dir.h"
#include "model/checkpoint/model_config.h"
#include "model/checkpoint/pytorch_bin.h"
#include "model/checkpoint/safetensors.h"
#include "model/util/status_macros.h"

namespace dserve {
namespace {

namespace fs = std::filesystem;

constexpr char kOut[] = "model.safetensors";

bool IsPickle(const std::string& name) {
  return absl::EndsWith(name, ".bin") || absl::EndsWith(name, ".pt") || absl::EndsWith(name, ".pth");
}

// Weight files of any layout: the new model.safetensors replaces them all.
bool IsWeightFile(const std::string& name, const std::set<std::string>& shards) {
  return shards.count(name) > 0 || name == "model.safetensors" || name == "model.safetensors.index.json" ||
         name == "pytorch_model.bin" || name == "pytorch_model.bin.index.json";
}

absl::Status CopyFileSynced(const std::string& from, const std::string& to) {
  std::error_code error;
  if (!fs::copy_file(from, to, fs::copy_options::none, error)) {
    return absl::InternalError(absl::StrCat("cannot copy ", from, " to ", to, ": ", error.message()));
  }
  int fd = ::open(to.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || ::fsync(fd) != 0) {
    if (fd >= 0) ::close(fd);
    return absl::InternalError(absl::StrCat("cannot fsync ", to));
  }
  ::close(fd);
  return absl::OkStatus();
}

struct Opened {
  std::vector<std::unique_ptr<TensorFile>> files;
  std::vector<TensorToWrite> tensors;
};

// Opens the weight files and lists their tensors; errors name the file.
absl::StatusOr<Opened> OpenWeights(const CheckpointFiles& files) {
  Opened opened;
  std::map<std::string, std::string> seen;  // tensor name -> file
  for (const std::string& path : files.weights) {
    std::unique_ptr<TensorFile> file;
    if (absl::EndsWith(path, ".bin")) {
      ASSIGN_OR_RETURN(file, PytorchBinFile::Open(path));
    } else {
      ASSIGN_OR_RETURN(file, SafetensorsFile::Open(path));
    }
    for (const TensorView& view : file->tensors()) {
      auto [it, inserted] = seen.emplace(view.name, path);
      if (!inserted) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": tensor ", view.name, " is also in ", it->second));
      }
      opened.tensors.push_back(TensorToWrite{view.name, view.dtype, view.shape, view.data});
    }
    opened.files.push_back(std::move(file));
  }
  return opened;
}

absl::Status WriteOut(const CheckpointFiles& files, const Opened& opened, const std::string& out_dir,
                      std::ostream& err) {
  std::string target = out_dir;
  while (target.size() > 1 && target.back() == '/') target.pop_back();
  const std::string parent = fs::path(target).has_parent_path() ? fs::path(target).parent_path().string() : ".";
  std::string tmp = target + ".tmp.XXXXXX";
  if (::mkdtemp(tmp.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("cannot create ", tmp, ": ", std::strerror(errno)));
  }
  ::chmod(tmp.c_str(), 0755);
  std::set<std::string> shards;
  for (const std::string& path : files.weights) shards.insert(fs::path(path).filename().string());
  auto write = [&]() -> absl::Status {
    RETURN_IF_ERROR(WriteSafetensors((fs::path(tmp) / kOut).string(), opened.tensors, {{"format", "pt"}}));
    for (const auto& entry : fs::directory_iterator(files.dir)) {
      const std::string name = entry.path().filename().string();
      if (!entry.is_regular_file() || IsWeightFile(name, shards)) continue;
      if (IsPickle(name)) {
        err << "dserve convert: skipped " << entry.path().string() << " (a pickle, not a weight file dserve reads)\n";
        continue;
      }
      RETURN_IF_ERROR(CopyFileSynced(entry.path().string(), (fs::path(tmp) / name).string()));
    }
    RETURN_IF_ERROR(FsyncDirectory(tmp));
    if (::rename(tmp.c_str(), target.c_str()) != 0) {
      return absl::InternalError(absl::StrCat("cannot rename ", tmp, " to ", target, ": ", std::strerror(errno)));
    }
    return FsyncDirectory(parent);
  };
  absl::Status status = write();
  if (!status.ok()) {
    std::error_code ignored;
    fs::remove_all(tmp, ignored);
  }
  return status;
}

}  // namespace

int RunConvertCommand(const ConvertCommandOptions& options, std::ostream& out, std::ostream& err) {
  absl::StatusOr<CheckpointFiles> files = ResolveCheckpoint(options.model_dir);
  if (!files.ok()) {
    err << "dserve convert: cannot read checkpoint: " << files.status().message() << "\n";
    return 2;
  }
  if (absl::Status config = ModelConfig::FromFile(files->config).status(); !config.ok()) {
    err << "dserve convert: cannot read checkpoint: " << config.message() << "\n";
    return 2;
  }
  std::error_code error;
  if (options.out_dir.empty() || fs::exists(fs::symlink_status(options.out_dir, error))) {
    err << "dserve convert: " << (options.out_dir.empty() ? "--out is empty" : options.out_dir + " exists")
        << "; give a new directory\n";
    return 1;
  }
  absl::StatusOr<Opened> opened = OpenWeights(*files);
  if (!opened.ok()) {
    err << "dserve convert: cannot read checkpoint: " << opened.status().message() << "\n";
    return 2;
  }
  if (absl::Status written = WriteOut(*files, *opened, options.out_dir, err); !written.ok()) {
    err << "dserve convert: writing " << options.out_dir << ": " << written.message() << "\n";
    return 1;
  }
  std::string sources;
  for (const std::string& path : files->weights) sources += (sources.empty() ? "" : ", ") + path;
  out << "dserve convert: " << opened->tensors.size() << " tensors from " << sources << " -> "
      << (fs::path(options.out_dir) / kOut).string() << "\n";
  return 0;
}

}  // namespace dserve
