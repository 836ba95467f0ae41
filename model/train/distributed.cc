#include "model/train/distributed.h"

#include <chrono>

#include <torch/torch.h>

#include "absl/strings/str_cat.h"
#include "model/deberta/torch_util.h"

#ifdef DSERVE_HAVE_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#endif

namespace dserve {
namespace {

class LocalCommunicator : public Communicator {
 public:
  LocalCommunicator() = default;
  absl::Status AllReduceSum(std::vector<torch::Tensor>&) override { return absl::OkStatus(); }
  absl::Status AllReduceMax(std::vector<torch::Tensor>&) override { return absl::OkStatus(); }
  absl::Status Broadcast(std::vector<torch::Tensor>&) override { return absl::OkStatus(); }
};

#ifdef DSERVE_HAVE_GLOO
class GlooCommunicator : public Communicator {
 public:
  GlooCommunicator(c10::intrusive_ptr<c10d::Store> store, c10::intrusive_ptr<c10d::ProcessGroupGloo> group,
                   int world_size, int rank)
      : store_(std::move(store)), group_(std::move(group)) {
    world_size_ = world_size;
    rank_ = rank;
  }

  absl::Status AllReduceSum(std::vector<torch::Tensor>& tensors) override {
    return Reduce(tensors, c10d::ReduceOp::SUM);
  }
  absl::Status AllReduceMax(std::vector<torch::Tensor>& tensors) override {
    return Reduce(tensors, c10d::ReduceOp::MAX);
  }
  absl::Status Broadcast(std::vector<torch::Tensor>& tensors) override {
    return TorchCall("broadcast", [&] {
      for (auto& t : tensors) {
        std::vector<torch::Tensor> one{t};
        c10d::BroadcastOptions opts;
        opts.rootRank = 0;
        group_->broadcast(one, opts)->wait();
      }
    });
  }

 private:
  absl::Status Reduce(std::vector<torch::Tensor>& tensors, c10d::ReduceOp op) {
    return TorchCall("all-reduce", [&] {
      for (auto& t : tensors) {
        std::vector<torch::Tensor> one{t};
        c10d::AllreduceOptions opts;
        opts.reduceOp = op;
        group_->allreduce(one, opts)->wait();
      }
    });
  }

  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> group_;
};
#endif

}  // namespace

bool DistributedAvailable() {
#ifdef DSERVE_HAVE_GLOO
  return true;
#else
  return false;
#endif
}

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::Create(const Options& options) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("--rank ", options.rank, " is outside [0, --world-size ",
                                                   options.world_size, ")"));
  }
  if (options.world_size == 1) return std::unique_ptr<Communicator>(new LocalCommunicator());
#ifdef DSERVE_HAVE_GLOO
  std::unique_ptr<Communicator> result;
  absl::Status status = TorchCall(
      absl::StrCat("joining the process group at ", options.master_addr, ":", options.master_port), [&] {
        c10d::TCPStoreOptions store_options;
        store_options.port = static_cast<uint16_t>(options.master_port);
        store_options.isServer = options.rank == 0;
        store_options.numWorkers = options.world_size;
        store_options.waitWorkers = true;
        store_options.timeout = std::chrono::milliseconds(1000L * options.timeout_s);
        auto store = c10::make_intrusive<c10d::TCPStore>(options.master_addr, store_options);
        auto gloo = c10d::ProcessGroupGloo::Options::create(std::chrono::milliseconds(1000L * options.timeout_s));
        const bool loopback = options.master_addr == "127.0.0.1" || options.master_addr == "localhost" ||
                              options.master_addr == "::1";
        if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname != nullptr && *ifname) {
          gloo->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
        } else if (loopback) {
          gloo->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
        } else {
          gloo->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
        }
        auto group = c10::make_intrusive<c10d::ProcessGroupGloo>(store, options.rank, options.world_size, gloo);
        result.reset(new GlooCommunicator(store, group, options.world_size, options.rank));
      });
  if (!status.ok()) return status;
  return result;
#else
  return absl::UnimplementedError(
      "distributed training needs c10d's Gloo backend, and this build has no Gloo headers "
      "(install libgloo-dev and re-run cmake)");
#endif
}

}  // namespace dserve
