// Data-parallel collectives for training: c10d ProcessGroupGloo over a
// TCPStore rendezvous (rank 0 hosts the store at master_addr:master_port).
// A world of one needs no process group and every call is the identity.
//
// Built with Gloo when the headers are there (Debian: libgloo-dev);
// otherwise Create fails for world_size > 1 with a message saying so.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <torch/types.h>

#include "absl/status/statusor.h"

namespace dserve {

class Communicator {
 public:
  struct Options {
    int world_size = 1;
    int rank = 0;
    std::string master_addr = "127.0.0.1";
    int master_port = 29500;
    int timeout_s = 1800;  // collectives and rendezvous
  };
  static absl::StatusOr<std::unique_ptr<Communicator>> Create(const Options& options);
  virtual ~Communicator() = default;

  int world_size() const { return world_size_; }
  int rank() const { return rank_; }

  // In-place sum over ranks of each tensor (float32, contiguous).
  virtual absl::Status AllReduceSum(std::vector<torch::Tensor>& tensors) = 0;
  // In-place max over ranks.
  virtual absl::Status AllReduceMax(std::vector<torch::Tensor>& tensors) = 0;
  // In-place copy of rank 0's tensors to every rank.
  virtual absl::Status Broadcast(std::vector<torch::Tensor>& tensors) = 0;

 protected:
  int world_size_ = 1;
  int rank_ = 0;
};

// Whether this build can run world_size > 1.
bool DistributedAvailable();

}  // namespace dserve
