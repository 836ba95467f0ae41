#include "server/doors/grpc/grpc_call.h"

#include <chrono>
#include <utility>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace dserve {

grpc::Status ToGrpc(const absl::Status& status) {
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

std::string ClientMetadata(grpc::CallbackServerContext* ctx, const char* key) {
  auto it = ctx->client_metadata().find(key);
  return it == ctx->client_metadata().end() ? std::string() : std::string(it->second.data(), it->second.size());
}

CallInfo GrpcCallInfo(grpc::CallbackServerContext* ctx, Protocol protocol, bool add_trailer) {
  CallInfo info;
  info.protocol = protocol;
  info.received = absl::Now();
  info.request_id = RequestIdFor(ClientMetadata(ctx, kRequestIdKey));
  info.authorization = ClientMetadata(ctx, "authorization");
  const auto deadline = ctx->deadline();
  info.deadline = deadline == std::chrono::system_clock::time_point::max() ? absl::InfiniteFuture()
                                                                           : absl::FromChrono(deadline);
  if (add_trailer) ctx->AddTrailingMetadata(kRequestIdKey, info.request_id);
  return info;
}

grpc::ServerUnaryReactor* FinishNow(grpc::CallbackServerContext* ctx, const absl::Status& status) {
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpc(status));
  return reactor;
}

void PathCallReactor::Started(std::shared_ptr<CallHandle> handle) {
  bool cancel = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    handle_ = handle;
    cancel = cancelled_;
  }
  if (cancel && handle != nullptr) handle->Cancel();
  Arrive();
}

void PathCallReactor::OnCancel() {
  std::shared_ptr<CallHandle> handle;
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_ = true;
    handle = handle_;
  }
  if (handle != nullptr) handle->Cancel();
}

void PathCallReactor::Completed(const absl::Status& status) {
  status_ = status;
  Arrive();
}

void PathCallReactor::Arrive() {
  if (pending_.fetch_sub(1) == 1) Finish(ToGrpc(status_));  // `this` may be deleted from here on
}

}  // namespace dserve
