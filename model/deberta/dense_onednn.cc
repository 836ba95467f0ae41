#include "model/deberta/dense_onednn.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <stdexcept>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#ifdef DSERVE_HAVE_DNNL
#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace dserve {

#ifdef DSERVE_HAVE_DNNL
namespace {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

const dnnl::engine& Engine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dt DataType(DenseType t) { return t == DenseType::kBF16 ? dt::bf16 : dt::f32; }
size_t ElementSize(DenseType t) { return t == DenseType::kBF16 ? 2 : 4; }

// 64-byte aligned bytes.
struct AlignedBuffer {
  void* data = nullptr;
  size_t size = 0;
  void Resize(size_t bytes) {
    if (bytes <= size) return;
    std::free(data);
    size = (bytes + 63) / 64 * 64;
    data = std::aligned_alloc(64, size);
    if (data == nullptr) throw std::runtime_error("dense: out of memory");
  }
  ~AlignedBuffer() { std::free(data); }
};

dnnl::primitive_attr Attributes(const PackedDense::Spec& s) {
  dnnl::post_ops po;
  if (s.residual) po.append_sum(1.0f);
  switch (s.activation) {
    case DenseActivation::kNone: break;
    case DenseActivation::kGeluErf: po.append_eltwise(1.0f, dnnl::algorithm::eltwise_gelu_erf, 0.0f, 0.0f); break;
    case DenseActivation::kGeluTanh: po.append_eltwise(1.0f, dnnl::algorithm::eltwise_gelu_tanh, 0.0f, 0.0f); break;
    case DenseActivation::kRelu: po.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f); break;
  }
  dnnl::primitive_attr attr;
  attr.set_post_ops(po);
  // Our own scratchpad per calling thread: no state shared between workers.
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

dnnl::matmul::primitive_desc MakePd(const PackedDense::Spec& s, bool bias, int64_t m,
                                    const dnnl::memory::desc& weights) {
  const dnnl::memory::desc src({m, s.in}, DataType(s.type), tag::ab);
  const dnnl::memory::desc dst({m, s.out}, DataType(s.type), tag::ab);
  const dnnl::memory::desc b({1, s.out}, dt::f32, tag::ab);
  const dnnl::matmul::desc desc = bias ? dnnl::matmul::desc(src, weights, b, dst) : dnnl::matmul::desc(src, weights, dst);
  return dnnl::matmul::primitive_desc(desc, Attributes(s), Engine());
}

dnnl::memory::desc AnyWeights(const PackedDense::Spec& s) {
  return dnnl::memory::desc({s.in, s.out}, DataType(s.type), tag::any);
}

// Whether a matmul implementation makes packing the weights at load pay:
// not a reference kernel, and not oneDNN's plain gemm ("gemm:jit", what
// oneDNN 2.6 runs where it has no brgemm for the type, e.g. f32 or int8 on
// an AVX2-only CPU). The plain gemm repacks internally on every call, and
// through the matmul primitive it was slower than LibTorch's own path: v3-base
// 1x128 fp32, 2 threads, AMD EPYC Zen 3 (AVX2 only): 0.2449 / 0.2387 s packed
// against 0.2152 / 0.2001 s with DSERVE_PACKED_LINEAR=0 (two interleaved
// rounds; 1x512 level: 0.9716 / 0.9863 against 1.0569 / 0.9559 s). In int8 its
// runtime scales also send oneDNN to that gemm.
bool PacksWeights(const std::string& impl) {
  return impl.rfind("ref", 0) != 0 && impl.find("gemm:") == std::string::npos;
}

// One primitive and what executing it needs.
struct Primitive {
  dnnl::matmul matmul;
  dnnl::memory::desc src, dst, scratchpad;
  std::string impl;
};

// Primitives shared by every PackedDense of the same problem (a primitive
// does not depend on the weights' values: the twelve layers of an encoder
// share theirs), keyed by the problem, the rows and the threads.
class PrimitiveCache {
 public:
  using Key = std::tuple<int64_t, int64_t, int, int, bool, bool, int64_t, int>;

  static PrimitiveCache& Get() {
    static PrimitiveCache* cache = new PrimitiveCache();  // never destroyed: used until exit
    return *cache;
  }

  std::shared_ptr<const Primitive> Find(const Key& key) const {
    std::shared_lock<std::shared_mutex> lock(mu_);
    auto it = map_.find(key);
    return it == map_.end() ? nullptr : it->second;
  }
  std::shared_ptr<const Primitive> Insert(const Key& key, std::shared_ptr<const Primitive> p) {
    std::unique_lock<std::shared_mutex> lock(mu_);
    // A server sees one M per (batch, padded length): bounded in practice;
    // past the cap start again (holders keep theirs alive).
    if (map_.size() >= kMax) map_.clear();
    return map_.emplace(key, std::move(p)).first->second;
  }
  size_t Size() const {
    std::shared_lock<std::shared_mutex> lock(mu_);
    return map_.size();
  }

 private:
  static constexpr size_t kMax = 1024;
  mutable std::shared_mutex mu_;
  std::map<Key, std::shared_ptr<const Primitive>> map_;
};

// A primitive built from its descriptor, with what executing it needs.
std::shared_ptr<const Primitive> MakePrimitive(const dnnl::matmul::primitive_desc& pd) {
  auto p = std::make_shared<Primitive>();
  p->matmul = dnnl::matmul(pd);
  p->src = pd.src_desc();
  p->dst = pd.dst_desc();
  p->scratchpad = pd.scratchpad_desc();
  p->impl = pd.impl_info_str();
  return p;
}

// W row-major [out, in] (the [in, out] matrix in layout "ba") reordered into
// `packed`'s layout at `to`.
void PackWeights(int64_t in, int64_t out, dt type, const void* weight, const dnnl::memory::desc& packed, void* to) {
  const dnnl::memory::desc plain({in, out}, type, tag::ba);
  dnnl::memory from_m(plain, Engine(), const_cast<void*>(weight));
  dnnl::memory to_m(packed, Engine(), to);
  dnnl::stream stream(Engine());
  dnnl::reorder(from_m, to_m).execute(stream, from_m, to_m);
  stream.wait();
}

// Runs p on this thread's stream with this thread's scratchpad; `args` holds
// everything but the scratchpad.
void Execute(const Primitive& p, std::unordered_map<int, dnnl::memory>& args) {
  thread_local AlignedBuffer scratch;
  scratch.Resize(std::max<size_t>(p.scratchpad.get_size(), 64));
  args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(p.scratchpad, Engine(), scratch.data));
  thread_local dnnl::stream stream(Engine());
  p.matmul.execute(stream, args);
  stream.wait();
}

}  // namespace

struct PackedDense::Impl {
  Spec spec;
  dnnl::memory::desc weights_md;  // the packed layout
  AlignedBuffer weights;
  std::vector<float> bias;  // empty: none

  PrimitiveCache::Key KeyFor(int64_t m, int threads) const {
    return {spec.in, spec.out, static_cast<int>(spec.type), static_cast<int>(spec.activation), spec.residual,
            !bias.empty(), m, threads};
  }

  std::shared_ptr<const Primitive> For(int64_t m, int threads) const {
    const PrimitiveCache::Key key = KeyFor(m, threads);
    if (auto p = PrimitiveCache::Get().Find(key)) return p;
    // Built on the calling thread, so oneDNN sizes it for this thread's
    // OpenMP team. Prefer the layout we packed; it is what `any` picks for
    // every M on AVX-512 (BA16a64b / BA16a64b2a), but ask explicitly if not.
    dnnl::matmul::primitive_desc pd = MakePd(spec, !bias.empty(), m, AnyWeights(spec));
    if (pd.weights_desc() != weights_md) pd = MakePd(spec, !bias.empty(), m, weights_md);
    return PrimitiveCache::Get().Insert(key, MakePrimitive(pd));
  }
};

bool PackedDense::Available(DenseType type) {
  auto probe = [](DenseType t) {
    try {
      Spec s;
      s.in = 256;
      s.out = 256;
      s.type = t;
      return PacksWeights(MakePd(s, true, 128, AnyWeights(s)).impl_info_str());
    } catch (const dnnl::error&) {
      return false;
    }
  };
  static const bool f32 = probe(DenseType::kF32);
  static const bool bf16 = probe(DenseType::kBF16);
  return type == DenseType::kBF16 ? bf16 : f32;
}

std::unique_ptr<PackedDense> PackedDense::Create(const Spec& spec, const void* weight, const float* bias) {
  if (spec.in <= 0 || spec.out <= 0 || weight == nullptr) throw std::runtime_error("dense: empty weight");
  auto impl = std::make_unique<Impl>();
  impl->spec = spec;
  try {
    // The layout the primitive prefers at a typical size (M = 128).
    impl->weights_md = MakePd(spec, bias != nullptr, 128, AnyWeights(spec)).weights_desc();
    impl->weights.Resize(impl->weights_md.get_size());
    PackWeights(spec.in, spec.out, DataType(spec.type), weight, impl->weights_md, impl->weights.data);
  } catch (const dnnl::error& e) {
    throw std::runtime_error(std::string("dense: oneDNN refused the packed matmul: ") + e.what());
  }
  if (bias != nullptr) impl->bias.assign(bias, bias + spec.out);
  return std::unique_ptr<PackedDense>(new PackedDense(std::move(impl)));
}

void PackedDense::Forward(const void* x, int64_t m, void* y, int threads) const {
  if (m <= 0) return;
  const Impl& d = *impl_;
  try {
    const std::shared_ptr<const Primitive> p = d.For(m, threads);
    const dnnl::engine& eng = Engine();
    std::unordered_map<int, dnnl::memory> args;
    args.reserve(5);
    args.emplace(DNNL_ARG_SRC, dnnl::memory(p->src, eng, const_cast<void*>(x)));
    args.emplace(DNNL_ARG_WEIGHTS, dnnl::memory(d.weights_md, eng, d.weights.data));
    args.emplace(DNNL_ARG_DST, dnnl::memory(p->dst, eng, y));
    if (!d.bias.empty()) {
      args.emplace(DNNL_ARG_BIAS, dnnl::memory({{1, d.spec.out}, dt::f32, tag::ab}, eng,
                                               const_cast<float*>(d.bias.data())));
    }
    Execute(*p, args);
  } catch (const dnnl::error& e) {
    throw std::runtime_error(std::string("dense: oneDNN matmul failed: ") + e.what());
  }
}

std::string PackedDense::Implementation(int64_t m, int threads) const {
  return impl_->For(m, threads)->impl;
}

size_t PackedDense::CachedPrimitives() const { return PrimitiveCache::Get().Size(); }
size_t PackedDense::PackedBytes() const { return impl_->weights_md.get_size(); }

// ------------------------------------------------------------------ int8 --

namespace {

dnnl::primitive_attr Int8Attributes(const std::vector<float>& scales, bool bias) {
  dnnl::primitive_attr attr;
  attr.set_output_scales(1 << 1, scales);  // per output channel, constant
  attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
  dnnl::post_ops po;
  po.append_binary(dnnl::algorithm::binary_mul, dnnl::memory::desc({1, 1}, dt::f32, tag::ab));
  if (bias) po.append_binary(dnnl::algorithm::binary_add, dnnl::memory::desc({1, static_cast<int64_t>(scales.size())}, dt::f32, tag::ab));
  attr.set_post_ops(po);
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

dnnl::matmul::primitive_desc MakeInt8Pd(int64_t in, const std::vector<float>& scales, bool bias, int64_t m,
                                        const dnnl::memory::desc& weights) {
  const int64_t out = static_cast<int64_t>(scales.size());
  const dnnl::memory::desc src({m, in}, dt::u8, tag::ab);
  const dnnl::memory::desc dst({m, out}, dt::f32, tag::ab);
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, weights, dst), Int8Attributes(scales, bias), Engine());
}

dnnl::memory::desc AnyInt8Weights(int64_t in, int64_t out) {
  return dnnl::memory::desc({in, out}, dt::s8, tag::any);
}

}  // namespace

struct PackedDenseInt8::Impl {
  int64_t in = 0, out = 0;
  std::vector<float> scales, bias;
  dnnl::memory::desc weights_md;
  AlignedBuffer weights;

  // A primitive holds this layer's output scales, so it is this layer's
  // alone (the fp32 ones are shared by every layer of a shape).
  mutable std::shared_mutex mu;
  mutable std::map<std::pair<int64_t, int>, std::shared_ptr<const Primitive>> cache;

  std::shared_ptr<const Primitive> For(int64_t m, int threads) const {
    {
      std::shared_lock<std::shared_mutex> lock(mu);
      auto it = cache.find({m, threads});
      if (it != cache.end()) return it->second;
    }
    dnnl::matmul::primitive_desc pd = MakeInt8Pd(in, scales, !bias.empty(), m, AnyInt8Weights(in, out));
    if (pd.weights_desc() != weights_md) pd = MakeInt8Pd(in, scales, !bias.empty(), m, weights_md);
    std::shared_ptr<const Primitive> p = MakePrimitive(pd);
    std::unique_lock<std::shared_mutex> lock(mu);
    if (cache.size() >= 256) cache.clear();  // one per (padded rows, threads): bounded in practice
    return cache.emplace(std::make_pair(m, threads), std::move(p)).first->second;
  }
};

bool PackedDenseInt8::Available() {
  static const bool available = [] {
    try {
      const std::vector<float> scales(64, 0.01f);
      return PacksWeights(MakeInt8Pd(64, scales, true, 16, AnyInt8Weights(64, 64)).impl_info_str());
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return available;
}

std::unique_ptr<PackedDenseInt8> PackedDenseInt8::Create(int64_t in, int64_t out, const int8_t* weight,
                                                         const float* scales, const float* bias) {
  if (in <= 0 || out <= 0 || weight == nullptr || scales == nullptr) throw std::runtime_error("dense int8: empty weight");
  auto impl = std::make_unique<Impl>();
  impl->in = in;
  impl->out = out;
  impl->scales.assign(scales, scales + out);
  if (bias != nullptr) impl->bias.assign(bias, bias + out);
  try {
    impl->weights_md = MakeInt8Pd(in, impl->scales, bias != nullptr, 128, AnyInt8Weights(in, out)).weights_desc();
    impl->weights.Resize(impl->weights_md.get_size());
    PackWeights(in, out, dt::s8, weight, impl->weights_md, impl->weights.data);
  } catch (const dnnl::error& e) {
    throw std::runtime_error(std::string("dense int8: oneDNN refused the packed matmul: ") + e.what());
  }
  return std::unique_ptr<PackedDenseInt8>(new PackedDenseInt8(std::move(impl)));
}

void PackedDenseInt8::Forward(const uint8_t* x, int64_t m, int32_t zero_point, float scale, float* y,
                              int threads) const {
  if (m <= 0) return;
  const Impl& d = *impl_;
  try {
    const std::shared_ptr<const Primitive> p = d.For(m, threads);
    const dnnl::engine& eng = Engine();
    int32_t zp = zero_point;
    float a = scale;
    std::unordered_map<int, dnnl::memory> args;
    args.reserve(7);
    args.emplace(DNNL_ARG_SRC, dnnl::memory(p->src, eng, const_cast<uint8_t*>(x)));
    args.emplace(DNNL_ARG_WEIGHTS, dnnl::memory(d.weights_md, eng, d.weights.data));
    args.emplace(DNNL_ARG_DST, dnnl::memory(p->dst, eng, y));
    args.emplace(DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, dnnl::memory({{1}, dt::s32, tag::x}, eng, &zp));
    args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, dnnl::memory({{1, 1}, dt::f32, tag::ab}, eng, &a));
    if (!d.bias.empty()) {
      args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(1) | DNNL_ARG_SRC_1,
                   dnnl::memory({{1, d.out}, dt::f32, tag::ab}, eng, const_cast<float*>(d.bias.data())));
    }
    Execute(*p, args);
  } catch (const dnnl::error& e) {
    throw std::runtime_error(std::string("dense int8: oneDNN matmul failed: ") + e.what());
  }
}

std::string PackedDenseInt8::Implementation(int64_t m, int threads) const { return impl_->For(m, threads)->impl; }

#else  // no oneDNN: nothing is available, Create refuses

struct PackedDense::Impl {
  Spec spec;
};

bool PackedDense::Available(DenseType) { return false; }
std::unique_ptr<PackedDense> PackedDense::Create(const Spec&, const void*, const float*) {
  throw std::runtime_error("dense: built without oneDNN (libdnnl-dev)");
}
void PackedDense::Forward(const void*, int64_t, void*, int) const {}
std::string PackedDense::Implementation(int64_t, int) const { return "none"; }
size_t PackedDense::CachedPrimitives() const { return 0; }
size_t PackedDense::PackedBytes() const { return 0; }

struct PackedDenseInt8::Impl {
  int64_t in = 0, out = 0;
};
bool PackedDenseInt8::Available() { return false; }
std::unique_ptr<PackedDenseInt8> PackedDenseInt8::Create(int64_t, int64_t, const int8_t*, const float*, const float*) {
  throw std::runtime_error("dense int8: built without oneDNN (libdnnl-dev)");
}
void PackedDenseInt8::Forward(const uint8_t*, int64_t, int32_t, float, float*, int) const {}
std::string PackedDenseInt8::Implementation(int64_t, int) const { return "none"; }

#endif

PackedDense::PackedDense(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PackedDense::~PackedDense() = default;
const PackedDense::Spec& PackedDense::spec() const { return impl_->spec; }

PackedDenseInt8::PackedDenseInt8(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PackedDenseInt8::~PackedDenseInt8() = default;
int64_t PackedDenseInt8::in() const { return impl_->in; }
int64_t PackedDenseInt8::out() const { return impl_->out; }

}  // namespace dserve
