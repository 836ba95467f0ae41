#include "model/checkpoint/safetensors.h"
#include "tests/model/checkpoint/temp_dir.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <random>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace dserve {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using nlohmann::json;

std::string GoldenWeights(const std::string& name) {
  return std::string(DSERVE_SHARED_DIR) + "/goldens/model/" + name + "/model.safetensors";
}

float FloatAt(const TensorView& t, int64_t i) {
  float v;
  std::memcpy(&v, static_cast<const char*>(t.data) + i * 4, 4);
  return v;
}

double Sum(const TensorView& t) {
  double s = 0;
  for (int64_t i = 0; i < t.numel(); ++i) s += FloatAt(t, i);
  return s;
}


void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// A file with `header` (raw text, the declared length is its size unless
// `declared_length` is given) followed by `data_bytes` zero bytes.
std::string RawFile(const std::string& header, size_t data_bytes,
                    std::optional<uint64_t> declared_length = std::nullopt) {
  uint64_t n = declared_length.value_or(header.size());
  std::string bytes(reinterpret_cast<const char*>(&n), 8);
  bytes += header;
  bytes.append(data_bytes, '\0');
  return bytes;
}

// Writes `bytes` to a file, opens it, expects a clean error containing every
// part of `parts` plus the file path.
void ExpectCorrupt(const TempDir& dir, const std::string& bytes,
                   const std::vector<std::string>& parts,
                   const SafetensorsFile::Options& options = {}) {
  const std::string path = dir.File("bad.safetensors");
  WriteBytes(path, bytes);
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::Open(path, options);
  ASSERT_FALSE(file.ok()) << "opened a corrupt file: " << bytes.substr(8, 200);
  const std::string message(file.status().message());
  EXPECT_THAT(message, HasSubstr(path));
  for (const std::string& part : parts) EXPECT_THAT(message, HasSubstr(part));
}

TEST(SafetensorsDType, NamesAndSizes) {
  EXPECT_STREQ(DTypeName(DType::kBF16), "BF16");
  EXPECT_EQ(DTypeSize(DType::kBF16), 2u);
  EXPECT_EQ(DTypeSize(DType::kF64), 8u);
  EXPECT_EQ(DTypeSize(DType::kBool), 1u);
  for (DType d : {DType::kF64, DType::kF32, DType::kF16, DType::kBF16, DType::kI64, DType::kI32,
                  DType::kI16, DType::kI8, DType::kU8, DType::kBool}) {
    absl::StatusOr<DType> back = DTypeFromName(DTypeName(d));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, d);
  }
  EXPECT_FALSE(DTypeFromName("F8_E4M3").ok());
  EXPECT_FALSE(DTypeFromName("f32").ok());
}

TEST(SafetensorsGolden, ClsFactorized) {
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file =
      SafetensorsFile::Open(GoldenWeights("cls_factorized"));
  ASSERT_TRUE(file.ok()) << file.status();
  const SafetensorsFile& f = **file;
  EXPECT_EQ(f.tensors().size(), 59u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  // Values computed with /usr/bin/python3 + torch.frombuffer from the raw file.
  const TensorView* word = f.Find("deberta.embeddings.word_embeddings.weight");
  ASSERT_NE(word, nullptr);
  EXPECT_EQ(word->dtype, DType::kF32);
  EXPECT_THAT(word->shape, ElementsAre(1200, 48));
  EXPECT_EQ(word->num_bytes, 1200u * 48 * 4);
  EXPECT_FLOAT_EQ(FloatAt(*word, 0), 0.037477944046258926f);
  EXPECT_FLOAT_EQ(FloatAt(*word, 1), -0.019600754603743553f);
  EXPECT_FLOAT_EQ(FloatAt(*word, word->numel() - 1), 0.25005409121513367f);
  EXPECT_NEAR(Sum(*word), 8.659042475603655, 1e-3);
  const TensorView* proj = f.Find("deberta.embeddings.embed_proj.weight");
  ASSERT_NE(proj, nullptr);
  EXPECT_THAT(proj->shape, ElementsAre(96, 48));
  EXPECT_FLOAT_EQ(FloatAt(*proj, 1), 0.4667849540710449f);
  const TensorView* rel = f.Find("deberta.encoder.rel_embeddings.weight");
  ASSERT_NE(rel, nullptr);
  EXPECT_THAT(rel->shape, ElementsAre(64, 96));  // 2 x position_buckets
  EXPECT_NEAR(Sum(*rel), 12.632782074175338, 1e-3);
  const TensorView* bias = f.Find("classifier.bias");
  ASSERT_NE(bias, nullptr);
  EXPECT_THAT(bias->shape, ElementsAre(5));
  EXPECT_FLOAT_EQ(FloatAt(*bias, 0), 0.10843250900506973f);
  EXPECT_FLOAT_EQ(FloatAt(*bias, 4), -0.19274094700813293f);
  EXPECT_EQ(f.Find("deberta.embeddings.position_embeddings.weight"), nullptr);
  EXPECT_EQ(f.Find("no.such.tensor"), nullptr);
  // tensors() is in data order, and the ranges tile without overlap.
  const char* previous_end = nullptr;
  for (const TensorView& t : f.tensors()) {
    const char* begin = static_cast<const char*>(t.data);
    if (previous_end != nullptr) EXPECT_GE(begin, previous_end) << t.name;
    previous_end = begin + t.num_bytes;
    EXPECT_EQ(f.Find(t.name), &t);
  }
}

TEST(SafetensorsGolden, QaAndRerank) {
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> qa =
      SafetensorsFile::Open(GoldenWeights("qa_c2p_only"));
  ASSERT_TRUE(qa.ok()) << qa.status();
  EXPECT_EQ((*qa)->tensors().size(), 46u);
  const TensorView* qa_bias = (*qa)->Find("qa_outputs.bias");
  ASSERT_NE(qa_bias, nullptr);
  EXPECT_FLOAT_EQ(FloatAt(*qa_bias, 0), -0.13658468425273895f);
  EXPECT_FLOAT_EQ(FloatAt(*qa_bias, 1), 0.05475262552499771f);
  const TensorView* pos_key =
      (*qa)->Find("deberta.encoder.layer.1.attention.self.pos_key_proj.weight");
  ASSERT_NE(pos_key, nullptr);
  EXPECT_THAT(pos_key->shape, ElementsAre(64, 64));
  EXPECT_NEAR(Sum(*pos_key), -12.8362381462357, 1e-3);
  EXPECT_THAT((*qa)->Find("deberta.encoder.rel_embeddings.weight")->shape, ElementsAre(96, 64));

  absl::StatusOr<std::unique_ptr<SafetensorsFile>> rerank =
      SafetensorsFile::Open(GoldenWeights("rerank_p2c_nonorm"));
  ASSERT_TRUE(rerank.ok()) << rerank.status();
  EXPECT_EQ((*rerank)->tensors().size(), 40u);
  const TensorView* cls = (*rerank)->Find("classifier.weight");
  ASSERT_NE(cls, nullptr);
  EXPECT_THAT(cls->shape, ElementsAre(1, 64));
  EXPECT_FLOAT_EQ(FloatAt(*cls, 0), 0.23890817165374756f);
  EXPECT_FLOAT_EQ(FloatAt(*(*rerank)->Find("classifier.bias"), 0), -0.09697102755308151f);
}

// Tensors of every kind the checkpoints use, with exactly representable values.
struct Sample {
  std::vector<float> f32 = {1.5f, -2.25f, 0.0f, 3.0e-3f, 1e6f, -0.5f};
  std::vector<uint16_t> f16 = {0x3C00, 0xC000, 0x3800};         // 1, -2, 0.5
  std::vector<uint16_t> bf16 = {0x3FC0, 0xC010, 0x3E20, 0x0000};  // 1.5, -2.25, 0.15625, 0
  std::vector<int64_t> i64 = {-1, 0, 1LL << 40};
  std::vector<TensorToWrite> Tensors() const {
    return {
        {"half", DType::kF16, {3}, f16.data()},  // odd byte count before a 4-byte type
        {"encoder.weight", DType::kF32, {2, 3}, f32.data()},
        {"bf", DType::kBF16, {2, 2}, bf16.data()},
        {"ids", DType::kI64, {3}, i64.data()},
        {"empty", DType::kF32, {0, 5}, nullptr},
        {"scalar", DType::kF32, {}, f32.data()},
    };
  }
};

TEST(SafetensorsRoundTrip, WriterThenReader) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  Sample sample;
  const std::string path = dir.File("model.safetensors");
  absl::Status status =
      WriteSafetensors(path, sample.Tensors(), {{"format", "pt"}, {"note", "round trip"}});
  ASSERT_TRUE(status.ok()) << status;
  // Only the final file is left: no temporary.
  EXPECT_THAT(dir.Entries(), ElementsAre("model.safetensors"));
  // Header length is a multiple of 8.
  std::string bytes = ReadBytes(path);
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(bytes[8], '{');

  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  const SafetensorsFile& f = **file;
  EXPECT_EQ(f.tensors().size(), 6u);
  EXPECT_EQ(f.metadata().size(), 2u);
  EXPECT_EQ(f.metadata().at("note"), "round trip");

  const TensorView* w = f.Find("encoder.weight");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->dtype, DType::kF32);
  EXPECT_THAT(w->shape, ElementsAre(2, 3));
  ASSERT_EQ(w->num_bytes, 24u);
  EXPECT_EQ(std::memcmp(w->data, sample.f32.data(), 24), 0);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(w->data) % 4, 0u);  // aligned despite the F16 before it

  const TensorView* half = f.Find("half");
  ASSERT_NE(half, nullptr);
  EXPECT_EQ(half->dtype, DType::kF16);
  ASSERT_EQ(half->num_bytes, 6u);
  EXPECT_EQ(std::memcmp(half->data, sample.f16.data(), 6), 0);

  const TensorView* bf = f.Find("bf");
  ASSERT_NE(bf, nullptr);
  EXPECT_EQ(bf->dtype, DType::kBF16);
  EXPECT_THAT(bf->shape, ElementsAre(2, 2));
  ASSERT_EQ(bf->num_bytes, 8u);
  EXPECT_EQ(std::memcmp(bf->data, sample.bf16.data(), 8), 0);

  const TensorView* ids = f.Find("ids");
  ASSERT_NE(ids, nullptr);
  EXPECT_EQ(std::memcmp(ids->data, sample.i64.data(), 24), 0);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(ids->data) % 8, 0u);

  const TensorView* empty = f.Find("empty");
  ASSERT_NE(empty, nullptr);
  EXPECT_THAT(empty->shape, ElementsAre(0, 5));
  EXPECT_EQ(empty->num_bytes, 0u);
  EXPECT_EQ(empty->numel(), 0);

  const TensorView* scalar = f.Find("scalar");
  ASSERT_NE(scalar, nullptr);
  EXPECT_TRUE(scalar->shape.empty());
  EXPECT_EQ(scalar->numel(), 1);
  EXPECT_FLOAT_EQ(FloatAt(*scalar, 0), 1.5f);
}

TEST(SafetensorsRoundTrip, OverwritesAtomicallyAndRejectsBadInput) {
  TempDir dir;
  Sample sample;
  const std::string path = dir.File("w.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, sample.Tensors()).ok());
  const std::string before = ReadBytes(path);

  std::vector<TensorToWrite> dup = sample.Tensors();
  dup.push_back(dup[1]);
  absl::Status status = WriteSafetensors(path, dup);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("\"encoder.weight\" given twice"));
  EXPECT_EQ(ReadBytes(path), before);

  std::vector<TensorToWrite> negative = {{"neg", DType::kF32, {2, -1}, sample.f32.data()}};
  status = WriteSafetensors(path, negative);
  EXPECT_THAT(std::string(status.message()), HasSubstr("neg"));
  std::vector<TensorToWrite> null_data = {{"x", DType::kF32, {2}, nullptr}};
  EXPECT_FALSE(WriteSafetensors(path, null_data).ok());
  std::vector<TensorToWrite> reserved = {{"__metadata__", DType::kF32, {1}, sample.f32.data()}};
  EXPECT_FALSE(WriteSafetensors(path, reserved).ok());
  EXPECT_EQ(ReadBytes(path), before);

  // Rename onto a directory fails after the data is written: no temp file stays.
  std::filesystem::create_directory(dir.File("a_dir"));
  status = WriteSafetensors(dir.File("a_dir"), sample.Tensors());
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(dir.Entries(), ElementsAre("a_dir", "w.safetensors"));
  // A missing directory is an error naming the path.
  status = WriteSafetensors(dir.File("missing/x.safetensors"), sample.Tensors());
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()), HasSubstr(dir.File("missing/x.safetensors")));

  // Overwrite with new content.
  std::vector<TensorToWrite> small = {{"only", DType::kF32, {1}, sample.f32.data()}};
  ASSERT_TRUE(WriteSafetensors(path, small).ok());
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->tensors().size(), 1u);
  EXPECT_TRUE((*file)->metadata().empty());
}

TEST(SafetensorsRoundTrip, EmptyFileHasNoTensors) {
  TempDir dir;
  const std::string path = dir.File("none.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, {}).ok());
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_TRUE((*file)->tensors().empty());
}

// --- Python cross-checks (skipped when /usr/bin/python3 + torch are absent) ---

// Runs python3 on `script` with `args`; returns stdout, or nullopt when
// python3 or torch is unavailable (exit code 77 from the script).
std::optional<std::string> RunPython(const TempDir& dir, const std::string& script,
                                     const std::string& args, int* exit_code) {
  if (::access("/usr/bin/python3", X_OK) != 0) return std::nullopt;
  const std::string script_path = dir.File("check.py");
  WriteBytes(script_path, script);
  std::string command = "/usr/bin/python3 " + script_path + " " + args;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return std::nullopt;
  std::string output;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) output.append(buffer, n);
  int status = ::pclose(pipe);
  *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (*exit_code == 77) return std::nullopt;
  return output;
}

// Loads a safetensors file the way the reference (Rust) implementation
// validates it: header starts with '{', offsets contiguous from 0 and covering
// the whole data section, byte counts matching; prints each tensor as float64
// values via torch.
constexpr char kPythonReader[] = R"PY(
import json, struct, sys
try:
    import torch
except ImportError:
    sys.exit(77)
DT = {"F32": (torch.float32, 4), "F16": (torch.float16, 2), "BF16": (torch.bfloat16, 2),
      "I64": (torch.int64, 8), "F64": (torch.float64, 8)}
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
assert n % 8 == 0, "header not padded"
text = b[8:8 + n].decode("utf-8")
assert text.startswith("{"), "header must start with {"
h = json.loads(text)
meta = h.pop("__metadata__", {})
data = b[8 + n:]
pos, out = 0, {}
for name, e in sorted(h.items(), key=lambda kv: kv[1]["data_offsets"]):
    s, t = e["data_offsets"]
    assert s == pos, f"{name}: gap or overlap at {s}, expected {pos}"
    dt, size = DT[e["dtype"]]
    numel = 1
    for d in e["shape"]:
        numel *= d
    assert t - s == numel * size, name
    x = torch.frombuffer(bytearray(data[s:t]), dtype=dt) if t > s else torch.zeros(0, dtype=dt)
    out[name] = {"dtype": e["dtype"], "shape": e["shape"],
                 "values": x.to(torch.float64).reshape(e["shape"]).flatten().tolist()}
    pos = t
assert pos == len(data), "data section not fully covered"
print(json.dumps({"metadata": meta, "tensors": out}))
)PY";

TEST(SafetensorsPython, OurFileLoadsInPython) {
  TempDir dir;
  Sample sample;
  const std::string path = dir.File("model.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, sample.Tensors(), {{"format", "pt"}}).ok());
  int exit_code = 0;
  std::optional<std::string> output = RunPython(dir, kPythonReader, path, &exit_code);
  if (!output) GTEST_SKIP() << "/usr/bin/python3 with torch not available";
  ASSERT_EQ(exit_code, 0) << *output;
  json result = json::parse(*output);
  EXPECT_EQ(result["metadata"], (json{{"format", "pt"}}));
  const json& t = result["tensors"];
  EXPECT_EQ(t["encoder.weight"]["values"],
            (json{1.5, -2.25, 0.0, static_cast<double>(3.0e-3f), 1e6, -0.5}));
  EXPECT_EQ(t["half"]["values"], (json{1.0, -2.0, 0.5}));
  EXPECT_EQ(t["bf"]["values"], (json{1.5, -2.25, 0.15625, 0.0}));
  EXPECT_EQ(t["bf"]["shape"], (json{2, 2}));
  EXPECT_EQ(t["ids"]["values"], (json{-1.0, 0.0, static_cast<double>(1LL << 40)}));
  EXPECT_EQ(t["empty"]["shape"], (json{0, 5}));
  EXPECT_EQ(t["scalar"]["values"], (json{1.5}));
}

// torch writes raw bytes of bf16/f16/f32 tensors; our reader must see the same.
constexpr char kPythonWriter[] = R"PY(
import json, struct, sys
try:
    import torch
except ImportError:
    sys.exit(77)
torch.manual_seed(0)
tensors = {"a.f32": torch.randn(3, 5), "b.bf16": torch.randn(4, 2).to(torch.bfloat16),
           "c.f16": torch.randn(7).to(torch.float16)}
header, blobs, pos = {"__metadata__": {"format": "pt"}}, [], 0
names = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16"}
for name, x in tensors.items():
    raw = x.contiguous().view(torch.uint8).numpy().tobytes() if hasattr(x, "numpy") else None
    header[name] = {"dtype": names[x.dtype], "shape": list(x.shape),
                    "data_offsets": [pos, pos + len(raw)]}
    blobs.append(raw)
    pos += len(raw)
text = json.dumps(header).encode()
text += b" " * ((8 - len(text) % 8) % 8)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
print(json.dumps({k: v.to(torch.float64).flatten().tolist() for k, v in tensors.items()}))
)PY";

float HalfToFloat(uint16_t h) {
  const int sign = h >> 15, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  double value = exponent == 0 ? std::ldexp(mantissa, -24)
                               : std::ldexp(mantissa + 1024, exponent - 25);
  return static_cast<float>(sign ? -value : value);
}

float Bf16ToFloat(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

TEST(SafetensorsPython, PythonFileLoadsHere) {
  TempDir dir;
  const std::string path = dir.File("py.safetensors");
  int exit_code = 0;
  std::optional<std::string> output = RunPython(dir, kPythonWriter, path, &exit_code);
  if (!output) GTEST_SKIP() << "/usr/bin/python3 with torch not available";
  ASSERT_EQ(exit_code, 0) << *output;
  json expected = json::parse(*output);
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  const TensorView* a = (*file)->Find("a.f32");
  const TensorView* b = (*file)->Find("b.bf16");
  const TensorView* c = (*file)->Find("c.f16");
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(b->dtype, DType::kBF16);
  EXPECT_THAT(b->shape, ElementsAre(4, 2));
  EXPECT_EQ(c->dtype, DType::kF16);
  ASSERT_EQ(expected["a.f32"].size(), 15u);
  for (int64_t i = 0; i < a->numel(); ++i) {
    EXPECT_EQ(FloatAt(*a, i), expected["a.f32"][i].get<double>());
  }
  for (int64_t i = 0; i < b->numel(); ++i) {
    uint16_t raw;
    std::memcpy(&raw, static_cast<const char*>(b->data) + 2 * i, 2);
    EXPECT_EQ(Bf16ToFloat(raw), expected["b.bf16"][i].get<double>()) << i;
  }
  for (int64_t i = 0; i < c->numel(); ++i) {
    uint16_t raw;
    std::memcpy(&raw, static_cast<const char*>(c->data) + 2 * i, 2);
    EXPECT_EQ(HalfToFloat(raw), expected["c.f16"][i].get<double>()) << i;
  }
}

// --- Corruption: every kind gives a clear error, never a crash ---

std::string Entry(const std::string& dtype, const std::string& shape, const std::string& offsets) {
  return "{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":" + offsets + "}";
}

TEST(SafetensorsCorrupt, EmptyFile) {
  TempDir dir;
  ExpectCorrupt(dir, "", {"0 bytes, shorter than the 8-byte header length"});
  ExpectCorrupt(dir, "abc", {"3 bytes"});
}

TEST(SafetensorsCorrupt, MissingFile) {
  TempDir dir;
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file =
      SafetensorsFile::Open(dir.File("nope.safetensors"));
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(file.status().message()), HasSubstr(dir.File("nope.safetensors")));
  file = SafetensorsFile::Open(dir.path());
  ASSERT_FALSE(file.ok());
  EXPECT_THAT(std::string(file.status().message()), HasSubstr("not a regular file"));
}

TEST(SafetensorsCorrupt, TruncatedFile) {
  TempDir dir;
  const std::string golden = ReadBytes(GoldenWeights("cls_factorized"));
  ASSERT_GT(golden.size(), 100000u);
  // Cut inside the data: the last tensors run past the end.
  ExpectCorrupt(dir, golden.substr(0, golden.size() / 2), {"run past the end", "truncated"});
  // Cut inside the header.
  ExpectCorrupt(dir, golden.substr(0, 100), {"header length 6576 exceeds the file"});
}

TEST(SafetensorsCorrupt, AbsurdHeaderLength) {
  TempDir dir;
  ExpectCorrupt(dir, RawFile("{}", 0, uint64_t{1} << 62), {"exceeds the limit"});
  ExpectCorrupt(dir, RawFile("{}", 0, ~uint64_t{0}), {"exceeds the limit"});
  SafetensorsFile::Options small;
  small.max_header_bytes = 16;
  ExpectCorrupt(dir, RawFile(std::string("{\"__metadata__\":{\"a\":\"b\"}}"), 0),
                {"exceeds the limit of 16 bytes"}, small);
}

TEST(SafetensorsCorrupt, HeaderNotJson) {
  TempDir dir;
  ExpectCorrupt(dir, RawFile("{\"a\": [1, 2", 16), {"header is not valid JSON"});
  ExpectCorrupt(dir, RawFile("", 0), {"header is not valid JSON"});
  ExpectCorrupt(dir, RawFile("[1, 2, 3]", 0), {"header must be a JSON object"});
  ExpectCorrupt(dir, RawFile(std::string("{\"a\":\0}", 7), 0), {"not valid JSON"});
}

TEST(SafetensorsCorrupt, EntryNotAnObject) {
  TempDir dir;
  ExpectCorrupt(dir, RawFile("{\"w\": [1, 2]}", 0), {"tensor \"w\"", "must be an object"});
  ExpectCorrupt(dir, RawFile("{\"w\": {\"shape\": [1], \"data_offsets\": [0, 4]}}", 4),
                {"tensor \"w\"", "dtype"});
  ExpectCorrupt(dir, RawFile("{\"w\": {\"dtype\": \"F32\", \"shape\": 4, \"data_offsets\": [0, 4]}}", 4),
                {"tensor \"w\"", "shape"});
}

TEST(SafetensorsCorrupt, OffsetsPastTheEnd) {
  TempDir dir;
  ExpectCorrupt(dir, RawFile("{\"w\":" + Entry("F32", "[4]", "[0,16]") + "}", 12),
                {"tensor \"w\"", "run past the end of the data section (12 bytes"});
  ExpectCorrupt(dir,
                RawFile("{\"w\":" + Entry("F32", "[1]", "[18446744073709551612,18446744073709551616]") + "}", 4),
                {"tensor \"w\"", "data_offsets"});
}

TEST(SafetensorsCorrupt, MalformedOffsets) {
  TempDir dir;
  ExpectCorrupt(dir, RawFile("{\"w\":" + Entry("F32", "[1]", "[4,0]") + "}", 8),
                {"tensor \"w\"", "begin > end"});
  ExpectCorrupt(dir, RawFile("{\"w\":" + Entry("F32", "[1]", "[0]") + "}", 8),
                {"tensor \"w\"", "[begin, end]"});
  ExpectCorrupt(dir, RawFile("{\"w\":" + Entry("F32", "[1]", "[-4,0]") + "}", 8),
                {"tensor \"w\"", "non-negative"});
  ExpectCorrupt(dir, RawFile("{\"w\":" + Entry("F32", "[1]", "[0,\"4\"]") + "}", 8),
                {"tensor \"w\""});
}

TEST(SafetensorsCorrupt, OverlappingTensors) {
  TempDir dir;
  ExpectCorrupt(dir,
                RawFile("{\"a\":" + Entry("F32", "[4]", "[0,16]") + ",\"b\":" +
                            Entry("F32", "[2]", "[8,16]") + "}",
                        16),
                {"overlap tensor", "\"a\"", "\"b\""});
  // Identical ranges overlap too.
  ExpectCorrupt(dir,
                RawFile("{\"a\":" + Entry("F32", "[2]", "[0,8]") + ",\"b\":" +
                            Entry("I32", "[2]", "[0,8]") + "}",
                        8),
                {"overlap"});
}

TEST(SafetensorsCorrupt, ZeroSizeTensorsNeverOverlap) {
  TempDir dir;
  const std::string path = dir.File("zero.safetensors");
  WriteBytes(path, RawFile("{\"a\":" + Entry("F32", "[4]", "[0,16]") + ",\"z\":" +
                               Entry("F32", "[0]", "[8,8]") + ",\"y\":" +
                               Entry("BF16", "[3,0]", "[16,16]") + "}",
                           16));
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->tensors().size(), 3u);
  EXPECT_EQ((*file)->Find("y")->num_bytes, 0u);
}

TEST(SafetensorsCorrupt, WrongByteCountForShape) {
  TempDir dir;
  ExpectCorrupt(dir, RawFile("{\"w\":" + Entry("F32", "[2,3]", "[0,20]") + "}", 24),
                {"tensor \"w\"", "span 20 bytes but F32 shape [2,3] needs 24"});
  ExpectCorrupt(dir, RawFile("{\"w\":" + Entry("BF16", "[4]", "[0,16]") + "}", 16),
                {"tensor \"w\"", "needs 8"});
}

TEST(SafetensorsCorrupt, UnknownDtype) {
  TempDir dir;
  ExpectCorrupt(dir, RawFile("{\"w\":" + Entry("Q4", "[2]", "[0,2]") + "}", 8),
                {"tensor \"w\"", "unknown or unsupported dtype \"Q4\""});
  ExpectCorrupt(dir, RawFile("{\"w\":" + Entry("F8_E4M3", "[2]", "[0,2]") + "}", 8),
                {"tensor \"w\"", "F8_E4M3"});
}

TEST(SafetensorsCorrupt, DuplicateNames) {
  TempDir dir;
  ExpectCorrupt(dir,
                RawFile("{\"w\":" + Entry("F32", "[1]", "[0,4]") + ",\"w\":" +
                            Entry("F32", "[1]", "[4,8]") + "}",
                        8),
                {"tensor \"w\"", "more than once"});
  ExpectCorrupt(dir, RawFile("{\"w\":{\"dtype\":\"F32\",\"dtype\":\"F16\",\"shape\":[1],"
                             "\"data_offsets\":[0,4]}}",
                             8),
                {"\"dtype\" twice"});
}

TEST(SafetensorsCorrupt, NegativeShape) {
  TempDir dir;
  ExpectCorrupt(dir, RawFile("{\"w\":" + Entry("F32", "[2,-1]", "[0,8]") + "}", 8),
                {"tensor \"w\"", "shape [2,-1] must hold non-negative integers"});
  ExpectCorrupt(dir, RawFile("{\"w\":" + Entry("F32", "[2.5]", "[0,8]") + "}", 8),
                {"tensor \"w\"", "non-negative integers"});
}

TEST(SafetensorsCorrupt, ElementCountOverflow) {
  TempDir dir;
  ExpectCorrupt(dir,
                RawFile("{\"w\":" + Entry("F32", "[4294967296,4294967296]", "[0,8]") + "}", 8),
                {"tensor \"w\"", "too many elements"});
  ExpectCorrupt(dir, RawFile("{\"w\":" + Entry("F64", "[4611686018427387904]", "[0,8]") + "}", 8),
                {"tensor \"w\"", "too large"});
}

TEST(SafetensorsCorrupt, BadMetadata) {
  TempDir dir;
  ExpectCorrupt(dir, RawFile("{\"__metadata__\":{\"format\":1}}", 0),
                {"__metadata__", "\"format\" must be a string"});
  ExpectCorrupt(dir, RawFile("{\"__metadata__\":[\"pt\"]}", 0), {"__metadata__", "object"});
}

}  // namespace
}  // namespace dserve

namespace dserve {
namespace {

// Random byte damage to a valid file: every result is a clean open or a
// clean error (run under ASan/UBSan to see out-of-bounds reads).
TEST(SafetensorsCorrupt, RandomDamageNeverCrashes) {
  TempDir dir;
  Sample sample;
  const std::string good_path = dir.File("good.safetensors");
  ASSERT_TRUE(WriteSafetensors(good_path, sample.Tensors(), {{"format", "pt"}}).ok());
  const std::string good = ReadBytes(good_path);
  std::mt19937 rng(1234);
  int opened = 0, rejected = 0;
  for (int trial = 0; trial < 400; ++trial) {
    std::string bytes = good;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      // Mostly the length prefix and the header, where parsing happens.
      const size_t limit = std::min<size_t>(bytes.size(), 8 + 400);
      bytes[rng() % limit] = static_cast<char>(rng() % 256);
    }
    if (trial % 7 == 0) bytes.resize(rng() % bytes.size());
    const std::string path = dir.File("damaged.safetensors");
    WriteBytes(path, bytes);
    absl::StatusOr<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::Open(path);
    if (file.ok()) {
      ++opened;
      // Whatever opened must be self-consistent and inside the mapping.
      for (const TensorView& t : (*file)->tensors()) {
        ASSERT_EQ(t.num_bytes, static_cast<size_t>(t.numel()) * DTypeSize(t.dtype)) << t.name;
        // Touch every byte: a range outside the mapping would fault here.
        unsigned checksum = 0;
        for (size_t i = 0; i < t.num_bytes; ++i) {
          checksum += static_cast<const unsigned char*>(t.data)[i];
        }
        volatile unsigned sink = checksum;  // keeps the reads
        (void)sink;
      }
    } else {
      ++rejected;
      EXPECT_THAT(std::string(file.status().message()), HasSubstr(path));
    }
  }
  EXPECT_GT(rejected, 100);  // most damage is caught
  EXPECT_EQ(opened + rejected, 400);
}

}  // namespace
}  // namespace dserve
