// Gradient checkpointing (activation recomputation) for training on long
// sequences: Checkpointed(fn, inputs) runs fn without keeping the tensors
// autograd would save inside it, and recomputes fn during backward, trading
// about one extra forward of fn for its activation memory (PyTorch's
// torch.utils.checkpoint, reentrant variant, written for LibTorch).
//
// Contract: fn's differentiable dependencies are `inputs` (their gradients
// flow back through this node) and leaf tensors fn reads directly (model
// weights: the recomputation's backward accumulates into their .grad, as in
// PyTorch). A non-leaf tensor that requires grad must be passed in `inputs`,
// never captured. fn must be deterministic given the CPU generator state
// (saved at the forward and restored for the recomputation, so dropout masks
// repeat) and the autocast state (also replayed). One output tensor.
#pragma once

#include <functional>
#include <vector>

#include <torch/types.h>

namespace dserve {

using CheckpointFn = std::function<torch::Tensor(const std::vector<torch::Tensor>& inputs)>;

// Without grad mode, just fn(inputs). Undefined tensors in `inputs` are passed
// through as undefined (and get no gradient).
torch::Tensor Checkpointed(CheckpointFn fn, std::vector<torch::Tensor> inputs);

}  // namespace dserve
