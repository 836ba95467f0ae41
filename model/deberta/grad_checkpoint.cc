#include "model/deberta/grad_checkpoint.h"

#include <memory>
#include <mutex>
#include <utility>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/torch.h>

#include "model/deberta/autocast.h"

namespace dserve {
namespace {

using torch::autograd::Node;
using torch::autograd::variable_list;

torch::Tensor CpuRngState() {
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void SetCpuRngState(const torch::Tensor& state) {
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

class CheckpointBackward : public Node {
 public:
  CheckpointBackward(CheckpointFn fn, std::vector<torch::Tensor> inputs, torch::Tensor rng,
                     CpuAutocastState autocast)
      : fn_(std::move(fn)), inputs_(std::move(inputs)), rng_(std::move(rng)), autocast_(autocast) {}

  variable_list apply(variable_list&& grads) override {
    if (!grads[0].defined()) return variable_list(inputs_.size());  // the output fed nothing
    // Recompute with grad, from detached copies of the inputs, under the
    // forward's generator and autocast state; put both back afterwards.
    std::vector<torch::Tensor> detached;
    detached.reserve(inputs_.size());
    for (const auto& t : inputs_) {
      detached.push_back(t.defined() ? t.detach().requires_grad_(t.requires_grad()) : t);
    }
    const torch::Tensor rng_now = CpuRngState();
    torch::Tensor out;
    {
      at::AutoGradMode grad_on(true);
      {
        CpuAutocastScope replay(autocast_);
        SetCpuRngState(rng_);
        try {
          out = fn_(detached);
        } catch (...) {
          SetCpuRngState(rng_now);
          throw;
        }
        SetCpuRngState(rng_now);
      }
      // Accumulates into the detached inputs' .grad and into the leaves fn
      // read directly (the weights).
      if (out.requires_grad()) torch::autograd::backward({out}, {grads[0]});
    }
    variable_list result;
    result.reserve(detached.size());
    for (auto& t : detached) result.push_back(t.defined() && t.requires_grad() ? t.grad() : torch::Tensor());
    inputs_.clear();  // once: the graph is not retained
    return result;
  }

  std::string name() const override { return "dserve::CheckpointBackward"; }

 private:
  CheckpointFn fn_;
  std::vector<torch::Tensor> inputs_;
  torch::Tensor rng_;
  CpuAutocastState autocast_;
};

}  // namespace

torch::Tensor Checkpointed(CheckpointFn fn, std::vector<torch::Tensor> inputs) {
  if (!at::GradMode::is_enabled()) return fn(inputs);
  const torch::Tensor rng = CpuRngState();
  torch::Tensor out;
  {
    torch::NoGradGuard no_grad;
    out = fn(inputs);
  }
  auto node = std::shared_ptr<CheckpointBackward>(
      new CheckpointBackward(std::move(fn), inputs, rng, CpuAutocastState::Now()), torch::autograd::deleteNode);
  node->set_next_edges(torch::autograd::collect_next_edges(inputs));
  torch::autograd::set_history(out, node);
  return out;
}

}  // namespace dserve
