// The front door a call came through: the `protocol` label of the request
// metrics.
#pragma once

namespace dserve {

enum class Protocol { kGrpc, kHttp };
// "grpc" | "http".
const char* ProtocolName(Protocol protocol);

}  // namespace dserve
