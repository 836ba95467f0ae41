// What the gRPC doors (dserve.v1 here, tei.v1 in doors/tei, the Open
// Inference Protocol in doors/oip) share: status mapping, call metadata,
// the CallInfo the request path needs, and the reactor of a unary call that
// goes through the path (DESIGN §8: the doors translate, nothing more).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/protocol.h"
#include "server/request_path.h"

namespace dserve {

// The client's request id (echoed as a trailer) and the version of the
// model that computed a response (initial metadata).
inline constexpr char kRequestIdKey[] = "x-request-id";
inline constexpr char kModelVersionKey[] = "x-dserve-model-version";

grpc::Status ToGrpc(const absl::Status& status);

// The value of client metadata `key`, "" when absent.
std::string ClientMetadata(grpc::CallbackServerContext* ctx, const char* key);

// What the path needs of a gRPC call: protocol, request id, authorization,
// deadline, arrival time. With `add_trailer` the request id goes back as a
// trailer (a stream adds it once, not per message).
CallInfo GrpcCallInfo(grpc::CallbackServerContext* ctx, Protocol protocol, bool add_trailer = true);

// A call refused or answered before it reached the path.
grpc::ServerUnaryReactor* FinishNow(grpc::CallbackServerContext* ctx, const absl::Status& status);

// A synchronous unary answer: `result`'s value into `response`, or its error.
template <typename Response>
grpc::ServerUnaryReactor* Reply(grpc::CallbackServerContext* ctx, absl::StatusOr<Response> result,
                                Response* response) {
  if (!result.ok()) return FinishNow(ctx, result.status());
  *response = *std::move(result);
  return FinishNow(ctx, absl::OkStatus());
}

// The reactor of a unary call the path runs. It finishes once both the path
// has returned the call's handle (Started) and the completion has run
// (Completed), whichever is last, so a cancel never reaches a deleted
// reactor; gRPC deletes it (OnDone) after. Subclasses write the response
// and then call Completed.
class PathCallReactor : public grpc::ServerUnaryReactor {
 public:
  // After the path returned (`handle` null when the call never queued).
  void Started(std::shared_ptr<CallHandle> handle);
  void OnCancel() override;
  void OnDone() override { delete this; }

 protected:
  // The call's outcome; `this` may be deleted once it returns.
  void Completed(const absl::Status& status);

 private:
  void Arrive();

  absl::Status status_;
  std::atomic<int> pending_{2};  // Started + Completed
  std::mutex mu_;
  std::shared_ptr<CallHandle> handle_;
  bool cancelled_ = false;
};

}  // namespace dserve
