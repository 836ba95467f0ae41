#include "model/checkpoint/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "model/util/logging.h"
#include "model/util/status_macros.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors data is little-endian; this reader maps it as is");

namespace dserve {
namespace {

using nlohmann::json;

struct DTypeInfo {
  DType dtype;
  const char* name;
  size_t size;
};
constexpr DTypeInfo kDTypes[] = {
    {DType::kF64, "F64", 8},  {DType::kF32, "F32", 4}, {DType::kF16, "F16", 2},
    {DType::kBF16, "BF16", 2}, {DType::kI64, "I64", 8}, {DType::kI32, "I32", 4},
    {DType::kI16, "I16", 2},  {DType::kI8, "I8", 1},   {DType::kU8, "U8", 1},
    {DType::kBool, "BOOL", 1},
};

std::string Errno() { return std::strerror(errno); }

absl::Status Corrupt(const std::string& path, const std::string& problem) {
  return absl::DataLossError(absl::StrCat(path, ": invalid safetensors file: ", problem));
}

absl::Status BadTensor(const std::string& path, const std::string& name,
                       const std::string& problem) {
  return absl::DataLossError(
      absl::StrCat(path, ": invalid safetensors file: tensor \"", name, "\": ", problem));
}

// The 8-byte header length must be there.
absl::Status CheckFileLength(const std::string& path, uint64_t file_bytes) {
  if (file_bytes >= 8) return absl::OkStatus();
  return Corrupt(path, absl::StrCat("file is ", file_bytes,
                                    " bytes, shorter than the 8-byte header length"));
}

// Parses the header, rejecting duplicate keys in any object (nlohmann keeps
// the last one silently, which would hide a duplicated tensor name).
absl::StatusOr<json> ParseHeader(const std::string& path, const char* begin, const char* end) {
  std::vector<std::set<std::string>> seen;
  std::string duplicate;
  bool duplicate_top_level = false;
  json::parser_callback_t callback = [&](int depth, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
        seen.emplace_back();
        break;
      case json::parse_event_t::object_end:
        if (!seen.empty()) seen.pop_back();
        break;
      case json::parse_event_t::key:
        if (!seen.empty() && !seen.back().insert(parsed.get<std::string>()).second &&
            duplicate.empty()) {
          duplicate = parsed.get<std::string>();
          duplicate_top_level = depth == 1;
        }
        break;
      default:
        break;
    }
    return true;
  };
  json header;
  try {
    header = json::parse(begin, end, callback);
  } catch (const json::exception& e) {
    return Corrupt(path, absl::StrCat("header is not valid JSON (", e.what(), ")"));
  }
  if (!duplicate.empty()) {
    if (duplicate_top_level) {
      return BadTensor(path, duplicate, "name appears more than once in the header");
    }
    return Corrupt(path, absl::StrCat("header has the key \"", duplicate, "\" twice in one object"));
  }
  if (!header.is_object()) {
    return Corrupt(path, absl::StrCat("header must be a JSON object, got ", header.type_name()));
  }
  return header;
}

// Reads a JSON value as a non-negative integer that fits in uint64.
bool AsUnsigned(const json& value, uint64_t* out) {
  if (value.is_number_unsigned()) {
    *out = value.get<uint64_t>();
    return true;
  }
  if (value.is_number_integer() && value.get<int64_t>() >= 0) {
    *out = static_cast<uint64_t>(value.get<int64_t>());
    return true;
  }
  return false;
}

absl::Status ParseMetadata(const std::string& path, const json& value,
                           std::map<std::string, std::string>* out) {
  if (!value.is_object()) {
    return Corrupt(path, absl::StrCat("\"__metadata__\" must be an object of strings, got ",
                                      value.type_name()));
  }
  for (auto it = value.begin(); it != value.end(); ++it) {
    if (!it.value().is_string()) {
      return Corrupt(path, absl::StrCat("\"__metadata__\" value for \"", it.key(),
                                        "\" must be a string, got ", it.value().type_name()));
    }
    (*out)[it.key()] = it.value().get<std::string>();
  }
  return absl::OkStatus();
}

struct Entry {
  TensorView view;
  uint64_t begin = 0;
  uint64_t end = 0;
};

absl::StatusOr<Entry> ParseEntry(const std::string& path, const std::string& name,
                                 const json& value, uint64_t data_bytes) {
  Entry entry;
  entry.view.name = name;
  if (!value.is_object()) {
    return BadTensor(path, name, absl::StrCat("entry must be an object, got ", value.type_name()));
  }
  auto dtype_it = value.find("dtype");
  if (dtype_it == value.end() || !dtype_it->is_string()) {
    return BadTensor(path, name, "\"dtype\" is missing or not a string");
  }
  absl::StatusOr<DType> dtype = DTypeFromName(dtype_it->get<std::string>());
  if (!dtype.ok()) return BadTensor(path, name, std::string(dtype.status().message()));
  entry.view.dtype = *dtype;

  auto shape_it = value.find("shape");
  if (shape_it == value.end() || !shape_it->is_array()) {
    return BadTensor(path, name, "\"shape\" is missing or not a list");
  }
  uint64_t numel = 1;
  for (const json& dim_json : *shape_it) {
    uint64_t dim = 0;
    if (!AsUnsigned(dim_json, &dim) ||
        dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return BadTensor(path, name, absl::StrCat("shape ", shape_it->dump(),
                                                " must hold non-negative integers"));
    }
    if (__builtin_mul_overflow(numel, dim, &numel) ||
        numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return BadTensor(path, name, absl::StrCat("shape ", shape_it->dump(),
                                                " has too many elements"));
    }
    entry.view.shape.push_back(static_cast<int64_t>(dim));
  }
  uint64_t expected_bytes = 0;
  if (__builtin_mul_overflow(numel, static_cast<uint64_t>(DTypeSize(*dtype)), &expected_bytes)) {
    return BadTensor(path, name, absl::StrCat("shape ", shape_it->dump(), " is too large"));
  }

  auto offsets_it = value.find("data_offsets");
  if (offsets_it == value.end() || !offsets_it->is_array() || offsets_it->size() != 2 ||
      !AsUnsigned((*offsets_it)[0], &entry.begin) || !AsUnsigned((*offsets_it)[1], &entry.end)) {
    return BadTensor(path, name,
                     "\"data_offsets\" must be [begin, end] with non-negative integers");
  }
  if (entry.begin > entry.end) {
    return BadTensor(path, name, absl::StrCat("data_offsets ", offsets_it->dump(),
                                              " has begin > end"));
  }
  if (entry.end - entry.begin != expected_bytes) {
    return BadTensor(path, name,
                     absl::StrCat("data_offsets ", offsets_it->dump(), " span ",
                                  entry.end - entry.begin, " bytes but ", DTypeName(*dtype),
                                  " shape ", shape_it->dump(), " needs ", expected_bytes));
  }
  if (entry.end > data_bytes) {
    return BadTensor(path, name,
                     absl::StrCat("data_offsets ", offsets_it->dump(),
                                  " run past the end of the data section (", data_bytes,
                                  " bytes; file truncated?)"));
  }
  entry.view.num_bytes = static_cast<size_t>(expected_bytes);
  return entry;
}

// Writes all of `size` bytes, retrying short writes and EINTR.
bool WriteAll(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::write(fd, p, std::min<size_t>(size, 1u << 30));
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

std::string DirName(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

const char* DTypeName(DType dtype) {
  for (const DTypeInfo& info : kDTypes) {
    if (info.dtype == dtype) return info.name;
  }
  return "?";
}

absl::StatusOr<DType> DTypeFromName(std::string_view name) {
  for (const DTypeInfo& info : kDTypes) {
    if (name == info.name) return info.dtype;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown or unsupported dtype \"", std::string(name),
                   "\" (supported: F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL)"));
}

size_t DTypeSize(DType dtype) {
  for (const DTypeInfo& info : kDTypes) {
    if (info.dtype == dtype) return info.size;
  }
  return 0;
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path,
                                                                       const Options& options) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    return absl::PermissionDeniedError(absl::StrCat(path, ": cannot open: ", Errno()));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    std::string error = Errno();
    ::close(fd);
    return absl::InternalError(absl::StrCat(path, ": cannot stat: ", error));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  const uint64_t file_bytes = static_cast<uint64_t>(st.st_size);
  // Checked before mapping too: an empty file cannot be mapped.
  if (absl::Status s = CheckFileLength(path, file_bytes); !s.ok()) {
    ::close(fd);
    return s;
  }
  void* mapping = ::mmap(nullptr, file_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  std::string map_error = mapping == MAP_FAILED ? Errno() : "";
  ::close(fd);  // the mapping keeps the file alive
  if (mapping == MAP_FAILED) {
    return absl::InternalError(absl::StrCat(path, ": mmap failed: ", map_error));
  }
  // From here on the destructor unmaps.
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  file->mapping_ = mapping;
  file->mapping_bytes_ = file_bytes;
  RETURN_IF_ERROR(file->Parse(static_cast<const char*>(mapping), file_bytes, options));
  Logger("checkpoint")->debug("opened {}: {} tensors, {} bytes", path, file->tensors_.size(),
                              file_bytes);
  return file;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::FromBytes(std::string name,
                                                                            std::string bytes,
                                                                            const Options& options) {
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = std::move(name);
  file->bytes_ = std::move(bytes);
  RETURN_IF_ERROR(file->Parse(file->bytes_.data(), file->bytes_.size(), options));
  return file;
}

absl::Status SafetensorsFile::Parse(const char* base, uint64_t file_bytes, const Options& options) {
  const std::string& path = path_;
  RETURN_IF_ERROR(CheckFileLength(path, file_bytes));
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, base, 8);  // little-endian (static_assert above)
  if (header_bytes > options.max_header_bytes) {
    return Corrupt(path, absl::StrCat("header length ", header_bytes, " exceeds the limit of ",
                                      options.max_header_bytes, " bytes"));
  }
  if (header_bytes > file_bytes - 8) {
    return Corrupt(path, absl::StrCat("header length ", header_bytes, " exceeds the file (",
                                      file_bytes, " bytes; truncated?)"));
  }
  ASSIGN_OR_RETURN(json header, ParseHeader(path, base + 8, base + 8 + header_bytes));

  const uint64_t data_start = 8 + header_bytes;
  const uint64_t data_bytes = file_bytes - data_start;
  std::vector<Entry> entries;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      RETURN_IF_ERROR(ParseMetadata(path, it.value(), &metadata_));
      continue;
    }
    ASSIGN_OR_RETURN(Entry entry, ParseEntry(path, it.key(), it.value(), data_bytes));
    entries.push_back(std::move(entry));
  }
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  // Zero-size tensors occupy no bytes and cannot overlap anything.
  const Entry* previous = nullptr;
  for (const Entry& entry : entries) {
    if (entry.begin == entry.end) continue;
    if (previous != nullptr && entry.begin < previous->end) {
      return BadTensor(path, entry.view.name,
                       absl::StrCat("bytes [", entry.begin, ", ", entry.end, ") overlap tensor \"",
                                    previous->view.name, "\" [", previous->begin, ", ",
                                    previous->end, ")"));
    }
    previous = &entry;
  }
  // Only now, with the whole header valid, hand out pointers.
  tensors_.reserve(entries.size());
  for (Entry& entry : entries) {
    entry.view.data = base + data_start + entry.begin;
    index_[entry.view.name] = tensors_.size();
    tensors_.push_back(std::move(entry.view));
  }
  return absl::OkStatus();
}

SafetensorsFile::~SafetensorsFile() {
  if (mapping_ != nullptr) ::munmap(mapping_, mapping_bytes_);
}

const TensorView* SafetensorsFile::Find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

static absl::StatusOr<std::string> SafetensorsHeader(const std::vector<TensorToWrite>& tensors,
                                                     const std::map<std::string, std::string>& metadata,
                                                     std::vector<size_t>* order) {
  std::set<std::string> names;
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  // Largest elements first keeps every tensor aligned to its element size
  // (the format forbids gaps between tensors, so padding is not an option).
  order->resize(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) (*order)[i] = i;
  std::stable_sort(order->begin(), order->end(), [&](size_t a, size_t b) {
    return DTypeSize(tensors[a].dtype) > DTypeSize(tensors[b].dtype);
  });
  uint64_t offset = 0;
  for (size_t i : *order) {
    const TensorToWrite& t = tensors[i];
    if (t.name.empty() || t.name == "__metadata__") {
      return absl::InvalidArgumentError(absl::StrCat("invalid tensor name \"", t.name, "\""));
    }
    if (!names.insert(t.name).second) {
      return absl::InvalidArgumentError(absl::StrCat("tensor \"", t.name, "\" given twice"));
    }
    if (DTypeSize(t.dtype) == 0) {
      return absl::InvalidArgumentError(absl::StrCat("tensor \"", t.name, "\": unknown dtype"));
    }
    uint64_t bytes = DTypeSize(t.dtype);
    for (int64_t d : t.shape) {
      if (d < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor \"", t.name, "\": negative dimension ", d));
      }
      if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes)) {
        return absl::InvalidArgumentError(absl::StrCat("tensor \"", t.name, "\": too large"));
      }
    }
    if (bytes > 0 && t.data == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("tensor \"", t.name, "\": data is null"));
    }
    header[t.name] = {{"dtype", DTypeName(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

absl::Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  std::vector<size_t> order;
  absl::StatusOr<std::string> header = SafetensorsHeader(tensors, metadata, &order);
  if (!header.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", header.status().message()));
  }
  std::string tmp = path + ".tmp.XXXXXX";
  int fd = ::mkstemp(tmp.data());
  if (fd < 0) {
    return absl::PermissionDeniedError(
        absl::StrCat(path, ": cannot create temporary file ", tmp, ": ", Errno()));
  }
  auto fail = [&](const std::string& what) {
    std::string error = absl::StrCat(path, ": ", what, " ", tmp, ": ", Errno());
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    return absl::InternalError(error);
  };
  ::fchmod(fd, 0644);  // mkstemp creates 0600; checkpoints are meant to be shared
  const uint64_t header_bytes = header->size();
  bool ok = WriteAll(fd, &header_bytes, 8) && WriteAll(fd, header->data(), header->size());
  for (size_t i = 0; ok && i < order.size(); ++i) {
    const TensorToWrite& t = tensors[order[i]];
    size_t bytes = DTypeSize(t.dtype);
    for (int64_t d : t.shape) bytes *= static_cast<size_t>(d);
    ok = bytes == 0 || WriteAll(fd, t.data, bytes);
  }
  if (!ok) return fail("cannot write");
  if (::fsync(fd) != 0) return fail("cannot fsync");
  if (::close(fd) != 0) {
    fd = -1;
    return fail("cannot close");
  }
  fd = -1;
  if (::rename(tmp.c_str(), path.c_str()) != 0) return fail("cannot rename into place");
  RETURN_IF_ERROR(FsyncDirectory(DirName(path)));
  Logger("checkpoint")->debug("wrote {}: {} tensors", path, tensors.size());
  return absl::OkStatus();
}

absl::Status FsyncDirectory(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return absl::InternalError(absl::StrCat(dir, ": cannot open directory: ", Errno()));
  int rc = ::fsync(fd);
  std::string error = rc != 0 ? Errno() : "";
  ::close(fd);
  if (rc != 0) return absl::InternalError(absl::StrCat(dir, ": cannot fsync directory: ", error));
  return absl::OkStatus();
}

}  // namespace dserve
