// InferenceService: the dserve.v1.Inference gRPC service (callback API).
//
// Each handler runs the cheap checks first (auth, draining, a deadline
// already past, the pre-processing cap, then after parsing: the request
// limits and whether the model's queue has room), then tokenizes on the gRPC
// thread (at most --max-concurrent-preprocess requests at once), enqueues one item
// per text / QA window / rerank chunk on the model's WorkerPool, and returns
// at once (reactions never block). The call finishes on the worker thread
// that completes its last item, where the outputs are decoded.
//
// Thread safety: all methods may run concurrently; each call holds the
// registry's snapshot of its model (hot reload swaps snapshots), draining is
// an atomic flag.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>

#include "dserve/v1/inference.grpc.pb.h"
#include "server/auth.h"
#include "server/metrics.h"
#include "server/model_registry.h"
#include "server/options.h"
#include "server/preprocess_gate.h"

namespace dserve {

// Classify, Answer and Rerank are raw methods (ByteBuffer in and out): the
// service parses the request itself so that invalid UTF-8 in a text is an
// INVALID_ARGUMENT naming the field and byte, not gRPC's bare parse error.
using InferenceServiceBase = v1::Inference::WithRawCallbackMethod_Classify<
    v1::Inference::WithRawCallbackMethod_Answer<
        v1::Inference::WithRawCallbackMethod_Rerank<v1::Inference::CallbackService>>>;

class InferenceService final : public InferenceServiceBase {
 public:
  // Not owned: `registry` and `metrics` must outlive the service.
  InferenceService(const ModelRegistry* registry, Metrics* metrics, const ServeOptions& options,
                   std::optional<TokenAuth> auth);

  grpc::ServerUnaryReactor* Classify(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                                   grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Rerank(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                                   grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* context, const v1::ListModelsRequest* request,
                                       v1::ListModelsResponse* response) override;

  // From now on new calls get UNAVAILABLE; calls already accepted finish.
  void StartDraining() { draining_.store(true); }
  bool draining() const { return draining_.load(); }

  struct Admission;  // per-call checks shared by the handlers (service.cc)

 private:
  const ModelRegistry* registry_;
  Metrics* metrics_;
  ServeOptions options_;
  std::optional<TokenAuth> auth_;
  std::atomic<bool> draining_{false};
  // Caps parse + tokenization in flight (--max-concurrent-preprocess).
  PreprocessGate preprocess_gate_;
};

// --max-concurrent-preprocess as set, or for 0 (auto): 2 x the usable cores
// (CPU affinity), at least 4.
int PreprocessLimit(const ServeOptions& options);

}  // namespace dserve
