// CPU autocast to bfloat16 for training forwards (`dserve train --bf16`),
// LibTorch's equivalent of Python's `torch.autocast("cpu", torch.bfloat16)`:
// inside the scope, matmul-class ops (linear, matmul, bmm, baddbmm, conv)
// cast their fp32 operands to bf16; the weights stay fp32 (the optimizer's
// master copy) and the bf16 casts are cached for the scope's lifetime, then
// dropped. LayerNorm and softmax are kept in fp32 by the encoders themselves
// (LibTorch 1.13's CPU autocast leaves layer_norm out of its fp32 list and
// runs softmax in the input's dtype); losses take fp32 logits.
//
// Backward runs outside the scope, as in PyTorch: autograd replays each op in
// the dtype its forward used.
#pragma once

#include <ATen/autocast_mode.h>

namespace dserve {

class CpuAutocastScope {
 public:
  explicit CpuAutocastScope(bool enabled) : enabled_(enabled) {
    if (!enabled_) return;
    was_enabled_ = at::autocast::is_cpu_enabled();
    previous_dtype_ = at::autocast::get_autocast_cpu_dtype();
    at::autocast::set_cpu_enabled(true);
    at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
    at::autocast::increment_nesting();
  }
  ~CpuAutocastScope() {
    if (!enabled_) return;
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_cpu_enabled(was_enabled_);
    at::autocast::set_autocast_cpu_dtype(previous_dtype_);
  }
  CpuAutocastScope(const CpuAutocastScope&) = delete;
  CpuAutocastScope& operator=(const CpuAutocastScope&) = delete;

 private:
  bool enabled_;
  bool was_enabled_ = false;
  at::ScalarType previous_dtype_ = at::kBFloat16;
};

// True inside a CpuAutocastScope: code that must stay fp32 there (softmax)
// asks this.
inline bool CpuAutocastActive() { return at::autocast::is_cpu_enabled(); }

}  // namespace dserve
