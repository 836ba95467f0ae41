#include "model/checkpoint/pytorch_bin.h"

#include <sys/stat.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <tuple>

#include <caffe2/serialize/inline_container.h>
#include <c10/util/Exception.h>

#include "absl/strings/str_cat.h"
#include "model/checkpoint/torch_pickle.h"
#include "model/util/status_macros.h"

namespace dserve {
namespace {

constexpr char kZipMagic[] = "PK\x03\x04";

// The same status with the file named first.
absl::Status InFile(const std::string& path, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat(path, ": ", status.message()));
}

absl::StatusOr<std::string> ReadPrefix(const std::string& path, size_t n) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
  if (!S_ISREG(st.st_mode)) return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::string prefix(n, '\0');
  in.read(prefix.data(), static_cast<std::streamsize>(n));
  prefix.resize(static_cast<size_t>(in.gcount()));
  return prefix;
}

absl::StatusOr<std::string> ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::stringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": read error"));
  return std::move(buffer).str();
}

// The bytes of one storage: where they start, how many there are.
struct StorageBytes {
  const char* data = nullptr;
  size_t size = 0;
};

template <typename T>
std::shared_ptr<void> Own(T value) {
  return std::shared_ptr<void>(new T(std::move(value)), [](void* p) { delete static_cast<T*>(p); });
}

}  // namespace

const TensorView* PytorchBinFile::Find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

absl::StatusOr<std::unique_ptr<PytorchBinFile>> PytorchBinFile::Open(const std::string& path) {
  ASSIGN_OR_RETURN(std::string magic, ReadPrefix(path, 4));
  std::unique_ptr<PytorchBinFile> file(new PytorchBinFile());
  file->path_ = path;
  StateDictPickle pickle;
  std::map<std::string, StorageBytes> storages;

  if (magic == std::string_view(kZipMagic, 4)) {
    file->format_ = "zip";
    // LibTorch's reader finds the archive's top folder (named after the file
    // torch.save wrote) and checks each record's CRC.
    absl::Status status = [&]() -> absl::Status {
      try {
        caffe2::serialize::PyTorchStreamReader reader(path);
        if (!reader.hasRecord("data.pkl")) {
          return absl::InvalidArgumentError(
              "a zip archive without data.pkl: not a torch.save file (a TorchScript module? save the weights with "
              "torch.save(model.state_dict(), path))");
        }
        at::DataPtr pkl;
        size_t pkl_size = 0;
        std::tie(pkl, pkl_size) = reader.getRecord("data.pkl");
        auto parsed = ParseStateDictPickle(std::string_view(static_cast<const char*>(pkl.get()), pkl_size));
        if (!parsed.ok()) return parsed.status();
        pickle = *std::move(parsed);
        for (const auto& [key, storage] : pickle.storages) {
          const std::string record = "data/" + key;
          if (!reader.hasRecord(record)) {
            return absl::DataLossError(absl::StrCat("storage record ", record, " is missing from the archive"));
          }
          at::DataPtr bytes;
          size_t size = 0;
          std::tie(bytes, size) = reader.getRecord(record);
          const size_t needed = static_cast<size_t>(storage.numel) * DTypeSize(storage.dtype);
          if (size < needed) {
            return absl::DataLossError(absl::StrCat("storage record ", record, " holds ", size, " bytes, ",
                                                    storage.numel, " ", DTypeName(storage.dtype),
                                                    " elements need ", needed));
          }
          storages[key] = StorageBytes{static_cast<const char*>(bytes.get()), size};
          file->buffers_.push_back(Own(std::move(bytes)));
        }
        return absl::OkStatus();
      } catch (const c10::Error& e) {
        return absl::DataLossError(absl::StrCat("truncated or corrupt zip archive (", e.what_without_backtrace(), ")"));
      } catch (const std::exception& e) {
        return absl::DataLossError(absl::StrCat("truncated or corrupt zip archive (", e.what(), ")"));
      }
    }();
    if (!status.ok()) return InFile(path, status);
  } else {
    file->format_ = "legacy";
    ASSIGN_OR_RETURN(std::string bytes, ReadAll(path));
    std::string_view rest = bytes;
    size_t used = 0;
    absl::Status header = ParseLegacyHeader(rest, &used);
    if (absl::IsFailedPrecondition(header)) return InFile(path, header);
    if (!header.ok()) {
      return absl::DataLossError(absl::StrCat(
          path, ": not a torch.save file (neither a zip archive nor the legacy pickle layout; truncated or corrupt?): ",
          header.message()));
    }
    rest.remove_prefix(used);
    auto parsed = ParseStateDictPickle(rest, &used);
    if (!parsed.ok()) return InFile(path, parsed.status());
    pickle = *std::move(parsed);
    rest.remove_prefix(used);
    auto keys = ParseStorageKeyList(rest, &used);
    if (!keys.ok()) return InFile(path, keys.status());
    rest.remove_prefix(used);
    for (const std::string& key : *keys) {
      auto it = pickle.storages.find(key);
      if (it == pickle.storages.end()) {
        return absl::DataLossError(absl::StrCat(path, ": storage ", key, " is listed but no tensor uses it"));
      }
      int64_t numel = 0;
      if (rest.size() < sizeof(numel)) {
        return absl::DataLossError(absl::StrCat(path, ": storage ", key, " is missing; file truncated?"));
      }
      std::memcpy(&numel, rest.data(), sizeof(numel));
      rest.remove_prefix(sizeof(numel));
      if (numel != it->second.numel) {
        return absl::DataLossError(absl::StrCat(path, ": storage ", key, " holds ", numel, " elements, its tensors say ",
                                                it->second.numel));
      }
      const size_t size = static_cast<size_t>(numel) * DTypeSize(it->second.dtype);
      if (rest.size() < size) {
        return absl::DataLossError(absl::StrCat(path, ": storage ", key, " needs ", size, " bytes, ", rest.size(),
                                                " are left; file truncated?"));
      }
      // Its own (aligned) buffer: the file's bytes are freed below.
      auto copy = std::make_shared<std::string>(rest.substr(0, size));
      storages[key] = StorageBytes{copy->data(), size};
      file->buffers_.push_back(copy);
      rest.remove_prefix(size);
    }
    for (const auto& [key, storage] : pickle.storages) {
      if (!storages.count(key)) {
        return absl::DataLossError(absl::StrCat(path, ": storage ", key, " is used but not stored; file truncated?"));
      }
    }
  }

  for (PickledTensor& t : pickle.tensors) {
    const StorageBytes& storage = storages.at(t.storage_key);
    const size_t element = DTypeSize(t.dtype);
    TensorView view;
    view.name = t.name;
    view.dtype = t.dtype;
    view.shape = t.shape;
    view.num_bytes = static_cast<size_t>(view.numel()) * element;
    bool contiguous = true;
    const std::vector<int64_t> strides = ContiguousStrides(t.shape);
    for (size_t d = 0; d < t.shape.size(); ++d) {
      if (t.shape[d] > 1 && t.strides[d] != strides[d]) contiguous = false;
    }
    if (contiguous) {
      view.data = storage.data + static_cast<size_t>(t.storage_offset) * element;
    } else {
      auto gathered = std::make_shared<std::string>();
      GatherStrided(t, storage.data, element, gathered.get());
      view.data = gathered->data();
      file->buffers_.push_back(gathered);
    }
    file->index_[view.name] = file->tensors_.size();
    file->tensors_.push_back(std::move(view));
  }
  return file;
}

}  // namespace dserve
