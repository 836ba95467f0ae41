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

// CPU autocast's switch and dtype, as seen now or as a scope sets them.
struct CpuAutocastState {
  bool enabled = false;
  at::ScalarType dtype = at::kBFloat16;
  static CpuAutocastState Now() {
    return {at::autocast::is_cpu_enabled(), at::autocast::get_autocast_cpu_dtype()};
  }
};

// Sets CPU autocast to `state` for the scope's lifetime and restores the
// previous state on exit (exceptions included). An enabled scope counts as
// one nesting level; the outermost one to close drops the cached casts.
// The gradient checkpoint (grad_checkpoint.cc) replays a forward's state
// with it during backward.
class CpuAutocastScope {
 public:
  explicit CpuAutocastScope(CpuAutocastState state) : previous_(CpuAutocastState::Now()), enabled_(state.enabled) {
    Apply(state);
    if (enabled_) at::autocast::increment_nesting();
  }
  // Training forwards: bfloat16 autocast when `bf16`, off otherwise.
  explicit CpuAutocastScope(bool bf16) : CpuAutocastScope(CpuAutocastState{bf16, at::kBFloat16}) {}
  ~CpuAutocastScope() {
    if (enabled_ && at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    Apply(previous_);
  }
  CpuAutocastScope(const CpuAutocastScope&) = delete;
  CpuAutocastScope& operator=(const CpuAutocastScope&) = delete;

 private:
  static void Apply(const CpuAutocastState& state) {
    at::autocast::set_cpu_enabled(state.enabled);
    at::autocast::set_autocast_cpu_dtype(state.dtype);
  }

  const CpuAutocastState previous_;
  const bool enabled_;
};

}  // namespace dserve
