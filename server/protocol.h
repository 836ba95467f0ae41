// The front door a call came through: the `protocol` label of the request
// metrics.
#pragma once

namespace dserve {

// kTeiGrpc: TEI's tei.v1 gRPC API (server/doors/tei/).
// kOip: the Open Inference Protocol, REST and gRPC (server/doors/oip/).
enum class Protocol { kGrpc, kHttp, kTeiGrpc, kOip };
// Every value, in enum order (metrics make one series per protocol).
inline constexpr Protocol kAllProtocols[] = {Protocol::kGrpc, Protocol::kHttp, Protocol::kTeiGrpc,
                                             Protocol::kOip};
inline constexpr int kNumProtocols = static_cast<int>(sizeof(kAllProtocols) / sizeof(kAllProtocols[0]));
// "grpc" | "http" | "tei-grpc" | "oip".
const char* ProtocolName(Protocol protocol);

}  // namespace dserve
