#include "model/tools/bench_command.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <ostream>
#include <thread>

#include <nlohmann/json.hpp>
#include <torch/cuda.h>
#include <torch/torch.h>
#include <torch/csrc/autograd/profiler_legacy.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "model/checkpoint/model_config.h"
#include "model/albert/albert_encoder.h"
#include "model/deberta/cpu_kernels.h"
#include "model/deberta/encoder.h"
#include "model/deberta/packed_linear.h"
#include "model/deberta/torch_util.h"
#include "model/deberta/weights.h"
#include "model/deberta_v1/deberta_v1_weights.h"
#include "model/util/cpu_info.h"

namespace dserve {
namespace {

using Clock = std::chrono::steady_clock;

nlohmann::json ShapeConfig(const std::string& shape) {
  // REFERENCE §8: the released v3 configs differ only in these sizes.
  struct Size { const char* name; int hidden, layers, heads, intermediate; };
  static const Size kSizes[] = {{"v3-xsmall", 384, 12, 6, 1536},
                                {"v3-small", 768, 6, 12, 3072},
                                {"v3-base", 768, 12, 12, 3072},
                                {"v3-large", 1024, 24, 16, 4096}};
  for (const auto& s : kSizes) {
    if (shape == s.name) {
      return {{"model_type", "deberta-v2"}, {"architectures", {"DebertaV2ForSequenceClassification"}},
              {"vocab_size", 128100}, {"hidden_size", s.hidden}, {"num_hidden_layers", s.layers},
              {"num_attention_heads", s.heads}, {"intermediate_size", s.intermediate},
              {"hidden_act", "gelu"}, {"max_position_embeddings", 512}, {"type_vocab_size", 0},
              {"layer_norm_eps", 1e-7}, {"relative_attention", true}, {"max_relative_positions", -1},
              {"position_buckets", 256}, {"pos_att_type", {"p2c", "c2p"}}, {"norm_rel_ebd", "layer_norm"},
              {"share_att_key", true}, {"position_biased_input", false}};
    }
  }
  // DeBERTa v1 (issue 26), microsoft/deberta-base and -large's config.json:
  // relative span max_relative_positions -1 -> max_position_embeddings 512,
  // no position buckets, "c2p|p2c" as a string, no absolute positions.
  struct V1Size { const char* name; int hidden, layers, heads, intermediate; };
  static const V1Size kV1Sizes[] = {{"deberta-base", 768, 12, 12, 3072}, {"deberta-large", 1024, 24, 16, 4096}};
  for (const auto& s : kV1Sizes) {
    if (shape == s.name) {
      return {{"model_type", "deberta"}, {"architectures", {"DebertaForSequenceClassification"}},
              {"vocab_size", 50265}, {"hidden_size", s.hidden}, {"num_hidden_layers", s.layers},
              {"num_attention_heads", s.heads}, {"intermediate_size", s.intermediate},
              {"hidden_act", "gelu"}, {"max_position_embeddings", 512}, {"type_vocab_size", 0},
              {"layer_norm_eps", 1e-7}, {"relative_attention", true}, {"max_relative_positions", -1},
              {"pos_att_type", "c2p|p2c"}, {"position_biased_input", false}};
    }
  }
  if (shape == "albert-base") {  // albert-base-v2's config.json
    return {{"model_type", "albert"}, {"architectures", {"AlbertForSequenceClassification"}},
            {"vocab_size", 30000}, {"embedding_size", 128}, {"hidden_size", 768}, {"num_hidden_layers", 12},
            {"num_hidden_groups", 1}, {"inner_group_num", 1}, {"num_attention_heads", 12},
            {"intermediate_size", 3072}, {"hidden_act", "gelu_new"}, {"max_position_embeddings", 512},
            {"type_vocab_size", 2}, {"layer_norm_eps", 1e-12}};
  }
  std::ifstream in(shape);
  if (!in) return nullptr;
  return nlohmann::json::parse(in, nullptr, false);
}

using EncoderForward = std::function<torch::Tensor(const EncoderInput&)>;

// A DeBERTa v1 encoder's weights with random values under v1's own tensor
// names and layout (HF's DebertaModel: in_proj interleaved per head, q_bias,
// v_bias, pos_proj without bias, pos_q_proj, rel_embeddings without a
// LayerNorm), loaded through the v1 family's loader
// (LoadDebertaV1EncoderWeights) onto the v2 encoder, as `dserve serve` loads
// a v1 checkpoint. HF's init: Linear weights and tables N(0,
// initializer_range), biases 0, LayerNorm gain 1.
EncoderWeights RandomV1Weights(const ModelConfig& c, torch::ScalarType dtype, const torch::Device& device) {
  const int64_t H = c.hidden_size, E = c.embedding_dim(), I = c.intermediate_size, h = c.num_attention_heads;
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  auto normal = [&](const std::string& name, std::vector<int64_t> shape) {
    tensors.emplace_back(name, torch::randn(shape) * c.initializer_range);
  };
  auto fill = [&](const std::string& name, int64_t n, float value) {
    tensors.emplace_back(name, torch::full({n}, value));
  };
  auto linear = [&](const std::string& name, int64_t out, int64_t in, bool bias) {
    normal(name + ".weight", {out, in});
    if (bias) fill(name + ".bias", out, 0.f);
  };
  auto norm = [&](const std::string& name, int64_t n) {
    fill(name + ".weight", n, 1.f);
    fill(name + ".bias", n, 0.f);
  };
  normal("deberta.embeddings.word_embeddings.weight", {c.vocab_size, E});
  if (c.position_biased_input) normal("deberta.embeddings.position_embeddings.weight", {c.max_position_embeddings, E});
  if (c.type_vocab_size > 0) normal("deberta.embeddings.token_type_embeddings.weight", {c.type_vocab_size, E});
  if (E != H) linear("deberta.embeddings.embed_proj", H, E, false);
  norm("deberta.embeddings.LayerNorm", H);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = absl::StrCat("deberta.encoder.layer.", i, ".");
    linear(p + "attention.self.in_proj", 3 * H, H, false);
    fill(p + "attention.self.q_bias", H, 0.f);
    fill(p + "attention.self.v_bias", H, 0.f);
    if (c.relative_attention && c.has_c2p()) linear(p + "attention.self.pos_proj", H, H, false);
    if (c.relative_attention && c.has_p2c()) linear(p + "attention.self.pos_q_proj", H, H, true);
    if (c.deberta_v1 && c.deberta_v1->talking_head) {
      normal(p + "attention.self.head_logits_proj.weight", {h, h});
      normal(p + "attention.self.head_weights_proj.weight", {h, h});
    }
    linear(p + "attention.output.dense", H, H, true);
    norm(p + "attention.output.LayerNorm", H);
    linear(p + "intermediate.dense", I, H, true);
    linear(p + "output.dense", H, I, true);
    norm(p + "output.LayerNorm", H);
  }
  if (c.relative_attention) normal("deberta.encoder.rel_embeddings.weight", {2 * c.max_relative(), H});
  // One safetensors file in memory (float32, contiguous, header padded to 8).
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    const uint64_t bytes = static_cast<uint64_t>(t.numel()) * sizeof(float);
    header[name] = {{"dtype", "F32"}, {"shape", t.sizes().vec()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string head = header.dump();
  head.append((8 - head.size() % 8) % 8, ' ');
  std::string file(8 + head.size() + offset, '\0');
  const uint64_t head_size = head.size();
  for (int b = 0; b < 8; ++b) file[static_cast<size_t>(b)] = static_cast<char>((head_size >> (8 * b)) & 0xff);
  file.replace(8, head.size(), head);
  size_t at = 8 + head.size();
  for (const auto& [name, t] : tensors) {
    const torch::Tensor f = t.contiguous();
    std::memcpy(&file[at], f.data_ptr<float>(), static_cast<size_t>(f.numel()) * sizeof(float));
    at += static_cast<size_t>(f.numel()) * sizeof(float);
  }
  tensors.clear();
  auto fail = [](const absl::Status& status) { throw std::runtime_error(std::string(status.message())); };
  auto parsed = SafetensorsFile::FromBytes("random deberta-v1 weights", std::move(file), {});
  if (!parsed.ok()) fail(parsed.status());
  std::vector<std::unique_ptr<TensorFile>> files;
  files.push_back(*std::move(parsed));
  WeightStore store(std::move(files), dtype, device);
  auto weights = LoadDebertaV1EncoderWeights(c, store);
  if (!weights.ok()) fail(weights.status());
  return *std::move(weights);
}

// The encoder of `config`'s family with random weights (HF's init). The
// kernel switches are the DeBERTa encoder's; ALBERT's takes `attention`
// (its pre-packed dense layers follow DSERVE_PACKED_LINEAR only).
// `int8`: float32 weights with the dense layers quantized (--dtype int8).
EncoderForward RandomEncoder(const ModelConfig& config, torch::ScalarType dtype, const torch::Device& device,
                             const DebertaEncoder::Options::Kernels& kernels, bool int8) {
  auto fail = [](const absl::Status& status) { throw std::runtime_error(std::string(status.message())); };
  if (config.albert) {
    AlbertEncoder::Options albert;
    albert.int8_linear = int8;
    albert.attention_kernel = kernels.attention;
    auto encoder = AlbertEncoder::Create(config, AlbertWeights::Init(config, dtype, device), albert);
    if (!encoder.ok()) fail(encoder.status());
    std::shared_ptr<AlbertEncoder> e = *std::move(encoder);
    return [e](const EncoderInput& in) { return e->Forward(in); };
  }
  DebertaEncoder::Options options;
  options.kernels = kernels;
  options.int8_linear = int8;
  auto encoder = DebertaEncoder::Create(
      config, config.deberta_v1 ? RandomV1Weights(config, dtype, device) : EncoderWeights::Init(config, dtype, device),
      options);
  if (!encoder.ok()) fail(encoder.status());
  std::shared_ptr<DebertaEncoder> e = *std::move(encoder);
  return [e](const EncoderInput& in) { return e->Forward(in); };
}

void Synchronize(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// The median of `v` as every engine of bench/run_all.sh defines it (Python's
// statistics.median, ort_bench.js): the middle value, or the mean of the two
// middle values for an even count.
double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Median wall time of `fn` after `warmup` untimed calls, the device
// synchronised around each call; the median process CPU seconds per call go
// to `cpu_seconds` when given (on a busy machine CPU time of a 1-thread run
// moves less than wall time).
template <typename Fn>
double MedianSeconds(const torch::Device& device, int warmup, int repeats, Fn&& fn, double* cpu_seconds = nullptr,
                     std::vector<double>* times_out = nullptr) {
  for (int i = 0; i < warmup; ++i) fn();
  Synchronize(device);
  std::vector<double> times, cpu;
  for (int i = 0; i < repeats; ++i) {
    const double c0 = ProcessCpuSeconds();
    const auto t0 = Clock::now();
    fn();
    Synchronize(device);
    times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    cpu.push_back(ProcessCpuSeconds() - c0);
  }
  if (cpu_seconds) *cpu_seconds = Median(cpu);
  if (times_out) *times_out = times;
  return Median(times);
}

// The matmul peak of `dtype` on a 2048^3 product: the fastest of the GEMMs
// our dense layers can run, each timed here (median of `repeats` after one
// warm-up; the packed fp32 one on 512 rows). With `int8`, Int8Linear
// (dynamic activation quantization included). Otherwise on CPU: fp32 FusedLinear (oneDNN's sgemm; torch::matmul
// goes through the BLAS, slower here) and the pre-packed oneDNN matmul
// (PackedLinear: weights reordered once, as the encoder's layers are); bf16
// torch::matmul (oneDNN) and the pre-packed matmul. Counting only one engine
// read MFU above 100% (fp32 1x512: 126%) once the packed layers beat sgemm.
// `ffn` = {M, hidden, intermediate} of the forward: its own FFN GEMM is timed
// too. `engines` gets each figure in GFLOP/s; the peak is the largest.
double MatmulGflops(torch::ScalarType dtype, const torch::Device& device, int repeats, bool int8,
                    const std::array<int64_t, 3>& ffn, nlohmann::json* engines) {
  torch::InferenceMode guard;
  const int64_t n = device.is_cuda() ? 8192 : 2048;
  auto a = torch::randn({n, n}).to(device, dtype), b = torch::randn({n, n}).to(device, dtype);
  const double flop = 2.0 * n * n * n;
  double best = 0;
  auto time = [&](const char* name, const std::function<void()>& fn, double rows = 0) {
    const double work = rows > 0 ? flop * rows / n : flop;
    const double gflops = work / MedianSeconds(device, 1, repeats, fn) / 1e9;
    (*engines)[name] = gflops;
    best = std::max(best, gflops);
  };
  if (int8) {
    const Int8Linear q = Int8Linear::Pack(b, torch::Tensor());
    time("int8_linear", [&] { auto c = q.Forward(a); });
  } else if (dtype == torch::kFloat && FusedLinearApplies(a, b, torch::Tensor())) {
    time("sgemm", [&] { auto c = FusedLinear(a, b, torch::Tensor()); });
  } else {
    time("torch_matmul", [&] { auto c = torch::matmul(a, b); });
  }
  if (!int8 && device.is_cpu() && PackedLinearEnabled() && PackedLinear::Supports(b)) {
    // fp32 is packed only up to kMaxFp32Rows rows (sgemm above): timed there.
    const int64_t m = dtype == torch::kFloat ? std::min(n, PackedLinear::kMaxFp32Rows) : n;
    const torch::Tensor rows = a.narrow(0, 0, m);
    const PackedLinear packed = PackedLinear::Pack(b, torch::Tensor());
    time("packed_matmul", [&] { auto c = packed.Forward(rows); }, static_cast<double>(m));
  }
  // The forward's own intermediate GEMM ([M, hidden] x [hidden, intermediate],
  // M = batch x length) through the engine the encoder's layer takes: a GEMM
  // at the model's shape can run faster than at 2048^3 (the operands sit in
  // cache), and the forward's MFU must not read above 100% of it.
  const auto [m, k, nn] = ffn;
  const auto x = torch::randn({m, k}).to(device, dtype), w = torch::randn({nn, k}).to(device, dtype);
  const double ffn_flop = 2.0 * m * k * nn;
  double s = 0;
  if (int8) {
    const Int8Linear q = Int8Linear::Pack(w, torch::Tensor());
    s = MedianSeconds(device, 1, repeats, [&] { auto c = q.Forward(x); });
  } else if (device.is_cpu() && PackedLinearEnabled() && PackedLinear::Supports(w)) {
    const PackedLinear packed = PackedLinear::Pack(w, torch::Tensor());
    if (packed.Applies(x)) s = MedianSeconds(device, 1, repeats, [&] { auto c = packed.Forward(x); });
  }
  if (s == 0 && dtype == torch::kFloat && FusedLinearApplies(x, w, torch::Tensor())) {
    s = MedianSeconds(device, 1, repeats, [&] { auto c = FusedLinear(x, w, torch::Tensor()); });
  }
  if (s == 0) s = MedianSeconds(device, 1, repeats, [&] { auto c = torch::matmul(x, w.t()); });
  (*engines)["model_ffn_shape"] = ffn_flop / s / 1e9;
  best = std::max(best, ffn_flop / s / 1e9);
  return best;
}

}  // namespace

double EncoderForwardFlops(int64_t batch, int64_t length, int64_t hidden, int64_t layers,
                           int64_t intermediate, int positional_terms) {
  const double tokens = static_cast<double>(batch) * length;
  const double dense = 2.0 * tokens * (4.0 * hidden * hidden + 2.0 * hidden * intermediate);
  const double attention = 2.0 * 2.0 * tokens * length * hidden;  // QK^T and PV
  // c2p and p2c as the maths defines them: one d-long product per (query,
  // key) pair and head, L x L per term. What runs differs (the relative
  // rows a block of queries or keys reads, up to 2L - 1 of them, then a
  // gather); counting the executed work would raise MFU for wasted work.
  const double positional = 2.0 * tokens * length * hidden * positional_terms;
  return layers * (dense + attention + positional);
}

int RunEncoderBench(const EncoderBenchOptions& o, std::ostream& out, std::ostream& err) {
  const int threads = o.threads > 0 ? o.threads : static_cast<int>(std::thread::hardware_concurrency());
  at::set_num_threads(threads);
  auto device = ParseDevice(o.device);
  if (!device.ok()) {
    err << "dserve bench encoder: " << device.status().message() << "\n";
    return 1;
  }
  nlohmann::json raw = ShapeConfig(o.shape);
  if (raw.is_null() || raw.is_discarded()) {
    err << "dserve bench encoder: unknown shape '" << o.shape
        << "' (v3-xsmall, v3-small, v3-base, v3-large, deberta-base, deberta-large, albert-base or a config.json path)\n";
    return 1;
  }
  auto config = ModelConfig::FromJson(raw);
  if (!config.ok()) {
    err << "dserve bench encoder: " << config.status().message() << "\n";
    return 1;
  }
  nlohmann::json report = {{"bench", "encoder"},
                           {"shape", o.shape},
                           {"batch_size", o.batch_size},
                           {"length", o.length},
                           {"repeats", o.repeats},
                           {"machine", {{"nproc", std::thread::hardware_concurrency()},
                                        {"threads", threads},
                                        {"device", device->str()},
                                        {"cpu", CpuModelName()},
                                        {"flags", CpuIsaFlags()}, {"bf16_matmul_path", Bf16MatmulPath()},
                                        {"fused_bf16_attention", OneDnnBf16GemmAvailable()},
                                        {"attention_gemm_fp32", FusedAttentionGemm(torch::kFloat)},
                                        {"attention_gemm_bf16", FusedAttentionGemm(torch::kBFloat16)},
                                        {"onednn_isa", OneDnnIsa()}}}};
  const int terms = config->relative_attention ? (config->has_c2p() ? 1 : 0) + (config->has_p2c() ? 1 : 0) : 0;
  const double flops = EncoderForwardFlops(o.batch_size, o.length, config->hidden_size, config->num_hidden_layers,
                                           config->intermediate_size, terms);
  report["gflop_per_forward"] = flops / 1e9;
  torch::manual_seed(0);
  using Kernels = DebertaEncoder::Options::Kernels;
  struct Run {
    std::string row, dtype;
    Kernels kernels;
  };
  std::vector<Run> runs;
  // DeBERTa's fused kernels; ALBERT's encoder switches its attention tile only (--compare-unfused).
  const bool kernel_switches = !config->albert;
  for (const auto& dtype_name : o.dtypes) {
    runs.push_back({dtype_name, dtype_name, Kernels()});
    if (o.ablate_kernels && kernel_switches) {  // leave one kernel out at a time
      const bool fp32 = dtype_name == "fp32";  // the linear kernel is fp32-only
      for (const auto& [name, off] : std::vector<std::pair<const char*, bool Kernels::*>>{
               {"attention", &Kernels::attention}, {"add_layer_norm", &Kernels::add_layer_norm},
               {"linear", &Kernels::linear}}) {
        if (!fp32 && off == &Kernels::linear) continue;
        Kernels k;
        k.*off = false;
        runs.push_back({dtype_name + "-no-" + name, dtype_name, k});
      }
    }
    if ((o.compare_unfused || o.ablate_kernels) && (kernel_switches || config->albert)) runs.push_back({dtype_name + "-unfused", dtype_name, Kernels::None()});
  }
  for (const Run& run : runs) {
    const std::string& row_name = run.row;
    const std::string& dtype_name = run.dtype;
    // int8: float32 weights, dense layers quantized (DebertaModel's --dtype int8).
    const bool int8 = dtype_name == "int8";
    if (int8 && !device->is_cpu()) {
      err << "dserve bench encoder: dtype int8 runs on the CPU only\n";
      return 1;
    }
    auto dtype = ParseDType(int8 ? "fp32" : dtype_name);
    if (!dtype.ok()) {
      err << "dserve bench encoder: " << dtype.status().message() << " (or int8)\n";
      return 1;
    }
    nlohmann::json row;
    absl::Status status = TorchCall("bench", [&] {
      nlohmann::json engines = nlohmann::json::object();
      row["matmul_gflops"] = MatmulGflops(*dtype, *device, o.repeats, int8,
                                             {o.batch_size * o.length, config->hidden_size, config->intermediate_size},
                                             &engines);
      row["matmul_engines_gflops"] = engines;
      torch::InferenceMode guard;
      const EncoderForward forward = RandomEncoder(*config, *dtype, *device, run.kernels, int8);
      EncoderInput input;
      const auto ids = torch::TensorOptions().dtype(torch::kLong).device(*device);
      input.input_ids = torch::randint(5, config->vocab_size, {o.batch_size, o.length}, ids);
      input.attention_mask = torch::ones({o.batch_size, o.length}, ids);
      double cpu_seconds = 0;
      std::vector<double> times;
      const double seconds =
          MedianSeconds(*device, o.warmup, o.repeats, [&] { forward(input); }, &cpu_seconds, &times);
      row["median_s"] = seconds;
      row["times_s"] = times;
      row["warmup"] = o.warmup;
      row["median_cpu_s"] = cpu_seconds;
      row["sequences_per_s"] = o.batch_size / seconds;
      row["model_gflops"] = flops / seconds / 1e9;
      row["mfu_vs_matmul"] = flops / seconds / 1e9 / row["matmul_gflops"].get<double>();
      if (!o.profile.empty()) {
        const std::string trace = absl::StrCat(o.profile, ".", row_name, ".json");
        {
          torch::autograd::profiler::RecordProfile profile(trace);
          forward(input);
          Synchronize(*device);
        }
        row["profile"] = trace;
      }
    });
    if (!status.ok()) {
      err << "dserve bench encoder: " << status.message() << "\n";
      return 1;
    }
    report["dtypes"][row_name] = row;
  }
  if (o.json) {
    out << report.dump(2) << "\n";
    return 0;
  }
  out << absl::StrFormat("encoder bench: shape %s, batch %d x %d tokens, device %s, %d threads, median of %d\n",
                         o.shape, o.batch_size, o.length, device->str(), threads, o.repeats);
  out << absl::StrFormat(
      "machine: nproc %d, cpu %s, flags %s, bf16 matmul path %s, oneDNN ISA %s, fused bf16 attention %s; attention "
      "GEMMs: fp32 %s, bf16 %s\n",
      std::thread::hardware_concurrency(), CpuModelName(), CpuIsaFlags(), Bf16MatmulPath(), OneDnnIsa(),
      OneDnnBf16GemmAvailable() ? "on" : "off (no oneDNN bf16 gemm on this CPU)", FusedAttentionGemm(torch::kFloat),
      FusedAttentionGemm(torch::kBFloat16));
  out << absl::StrFormat("model GFLOP per forward: %.1f\n", flops / 1e9);
  out << absl::StrFormat("%-22s %14s %12s %10s %12s %14s %8s\n", "dtype", "matmul GFLOP/s", "forward s", "cpu s",
                         "seq/s", "model GFLOP/s", "MFU");
  for (const Run& run : runs) {
    const auto& r = report["dtypes"][run.row];
    out << absl::StrFormat("%-22s %14.1f %12.4f %10.4f %12.2f %14.1f %7.1f%%\n", run.row,
                           r["matmul_gflops"].get<double>(), r["median_s"].get<double>(),
                           r["median_cpu_s"].get<double>(), r["sequences_per_s"].get<double>(),
                           r["model_gflops"].get<double>(), 100 * r["mfu_vs_matmul"].get<double>());
  }
  for (const char* other : {"bf16", "int8"}) {
    if (report["dtypes"].contains("fp32") && report["dtypes"].contains(other)) {
      out << absl::StrFormat("%s / fp32 throughput: %.2fx\n", other,
                             report["dtypes"]["fp32"]["median_s"].get<double>() /
                                 report["dtypes"][other]["median_s"].get<double>());
    }
  }
  return 0;
}

}  // namespace dserve
