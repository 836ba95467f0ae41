// OipCalls: what both Open Inference Protocol doors (REST: oip_rest.h, gRPC:
// oip_grpc_service.h) do once they have read a call, over RequestPath
// (DESIGN §8): find the model (and version), convert the tensors
// (oip_tensors.h), run the v1 call on the path, convert its response back;
// and the metadata, readiness, configuration and statistics answers. The
// doors only read and write their wire formats and map status codes.
//
// Auth, draining, deadlines, limits, queueing and metrics are the path's:
// calls are counted under protocol="oip"; a refusal before the path ran the
// call (unknown model, invalid tensors) is counted by RequestPath::Refuse.
// Health (live, ready, model ready) needs no token, as the HTTP /health.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "inference/grpc_service.pb.h"
#include "server/doors/oip/oip_tensors.h"
#include "server/request_path.h"

namespace dserve {
namespace oip {

using InferDone = std::function<void(const absl::Status& status, std::unique_ptr<inference::ModelInferResponse>)>;

class OipCalls {
 public:
  // Not owned: `path` must outlive this.
  explicit OipCalls(RequestPath* path) : path_(path) {}

  // After RequestPath::Admit (`ticket`): the model and version, the tensor
  // contract, then the v1 call. `done` runs exactly once: inline when the
  // call is refused before it was queued (then nullptr is returned), else on
  // a completion thread. The response has typed contents (the door may move
  // them to raw). `input`'s views are read before this returns.
  std::shared_ptr<CallHandle> Infer(CallInfo call, const InferInput& input, PreprocessGate::Ticket ticket,
                                    InferDone done);

  // Ready: not draining (the models are loaded before the doors open).
  bool ServerReady() const { return !path_->draining(); }
  // The model serves now (and is `version`, when given) and the server is not draining.
  bool ModelReady(const std::string& name, const std::string& version) const;

  absl::StatusOr<inference::ServerMetadataResponse> ServerMetadata(const CallInfo& call);
  absl::StatusOr<inference::ModelMetadataResponse> ModelMetadata(const CallInfo& call, const std::string& name,
                                                                 const std::string& version);
  absl::StatusOr<inference::ModelConfigResponse> ModelConfig(const CallInfo& call, const std::string& name,
                                                             const std::string& version);
  // Every model when `name` is "".
  absl::StatusOr<inference::ModelStatisticsResponse> ModelStatistics(const CallInfo& call, const std::string& name,
                                                                     const std::string& version);

  RequestPath* path() const { return path_; }

 private:
  // The model `name` as served now, which must be `version` when given.
  absl::StatusOr<std::shared_ptr<const ServedModel>> Find(const std::string& name, const std::string& version) const;
  // CheckCaller, then Find; a refusal is counted under `method`.
  absl::StatusOr<std::shared_ptr<const ServedModel>> CheckAndFind(const CallInfo& call, const char* method,
                                                                  const std::string& name,
                                                                  const std::string& version);

  RequestPath* const path_;
};

// An INVALID_ARGUMENT from the v1 path names v1 fields ("texts[1]: empty
// text"); the OIP client sent tensors: "input TEXT[1]: empty text".
absl::Status WithTensorNames(const absl::Status& status, Task task);

}  // namespace oip
}  // namespace dserve
