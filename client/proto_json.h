// Protobuf message -> JSON for `dserve-client --json`: field names exactly as
// in the proto (snake_case), every field printed (defaults included, so
// scripts need no fallbacks), 64-bit integers as JSON numbers (not strings as
// in the proto3 JSON mapping), enums by name, floats by their shortest
// decimal form, unset message or optional fields as null.
#pragma once

#include <google/protobuf/message.h>
#include <nlohmann/json.hpp>

namespace dserve {

nlohmann::json ProtoToJson(const google::protobuf::Message& message);

}  // namespace dserve
