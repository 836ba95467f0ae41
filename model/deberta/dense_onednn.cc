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
    auto p = std::make_shared<Primitive>();
    p->matmul = dnnl::matmul(pd);
    p->src = pd.src_desc();
    p->dst = pd.dst_desc();
    p->scratchpad = pd.scratchpad_desc();
    p->impl = pd.impl_info_str();
    return PrimitiveCache::Get().Insert(key, std::move(p));
  }
};

bool PackedDense::Available(DenseType type) {
  auto probe = [](DenseType t) {
    try {
      Spec s;
      s.in = 64;
      s.out = 64;
      s.type = t;
      const std::string impl = MakePd(s, true, 16, AnyWeights(s)).impl_info_str();
      return impl.rfind("ref", 0) != 0;
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
    // W is [out, in] row-major: the [in, out] matrix in layout "ba".
    const dnnl::memory::desc plain({spec.in, spec.out}, DataType(spec.type), tag::ba);
    dnnl::memory from(plain, Engine(), const_cast<void*>(weight));
    dnnl::memory to(impl->weights_md, Engine(), impl->weights.data);
    dnnl::stream stream(Engine());
    dnnl::reorder(from, to).execute(stream, from, to);
    stream.wait();
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
    thread_local AlignedBuffer scratch;
    scratch.Resize(std::max<size_t>(p->scratchpad.get_size(), 64));
    const dnnl::engine& eng = Engine();
    std::unordered_map<int, dnnl::memory> args;
    args.reserve(5);
    args.emplace(DNNL_ARG_SRC, dnnl::memory(p->src, eng, const_cast<void*>(x)));
    args.emplace(DNNL_ARG_WEIGHTS, dnnl::memory(d.weights_md, eng, d.weights.data));
    args.emplace(DNNL_ARG_DST, dnnl::memory(p->dst, eng, y));
    args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(p->scratchpad, eng, scratch.data));
    if (!d.bias.empty()) {
      args.emplace(DNNL_ARG_BIAS, dnnl::memory({{1, d.spec.out}, dt::f32, tag::ab}, eng,
                                               const_cast<float*>(d.bias.data())));
    }
    thread_local dnnl::stream stream(eng);
    p->matmul.execute(stream, args);
    stream.wait();
  } catch (const dnnl::error& e) {
    throw std::runtime_error(std::string("dense: oneDNN matmul failed: ") + e.what());
  }
}

std::string PackedDense::Implementation(int64_t m, int threads) const {
  return impl_->For(m, threads)->impl;
}

size_t PackedDense::CachedPrimitives() const { return PrimitiveCache::Get().Size(); }
size_t PackedDense::PackedBytes() const { return impl_->weights_md.get_size(); }

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

#endif

PackedDense::PackedDense(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PackedDense::~PackedDense() = default;
const PackedDense::Spec& PackedDense::spec() const { return impl_->spec; }

}  // namespace dserve
