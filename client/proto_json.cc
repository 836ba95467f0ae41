#include "client/proto_json.h"

#include <charconv>
#include <cstdlib>
#include <string>

#include <google/protobuf/descriptor.h>

namespace dserve {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// The double whose shortest decimal form is the float's (0.8123f prints as
// 0.8123, not 0.8123000264167786).
double FloatAsDouble(float value) {
  char buffer[32];
  auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  *result.ptr = '\0';
  return std::strtod(buffer, nullptr);
}

nlohmann::json Scalar(const Message& m, const Reflection* r, const FieldDescriptor* f) {
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32: return r->GetInt32(m, f);
    case FieldDescriptor::CPPTYPE_INT64: return r->GetInt64(m, f);
    case FieldDescriptor::CPPTYPE_UINT32: return r->GetUInt32(m, f);
    case FieldDescriptor::CPPTYPE_UINT64: return r->GetUInt64(m, f);
    case FieldDescriptor::CPPTYPE_DOUBLE: return r->GetDouble(m, f);
    case FieldDescriptor::CPPTYPE_FLOAT: return FloatAsDouble(r->GetFloat(m, f));
    case FieldDescriptor::CPPTYPE_BOOL: return r->GetBool(m, f);
    case FieldDescriptor::CPPTYPE_ENUM: return r->GetEnum(m, f)->name();
    case FieldDescriptor::CPPTYPE_STRING: return r->GetString(m, f);
    case FieldDescriptor::CPPTYPE_MESSAGE: return ProtoToJson(r->GetMessage(m, f));
  }
  return nullptr;
}

nlohmann::json RepeatedElement(const Message& m, const Reflection* r, const FieldDescriptor* f,
                               int i) {
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32: return r->GetRepeatedInt32(m, f, i);
    case FieldDescriptor::CPPTYPE_INT64: return r->GetRepeatedInt64(m, f, i);
    case FieldDescriptor::CPPTYPE_UINT32: return r->GetRepeatedUInt32(m, f, i);
    case FieldDescriptor::CPPTYPE_UINT64: return r->GetRepeatedUInt64(m, f, i);
    case FieldDescriptor::CPPTYPE_DOUBLE: return r->GetRepeatedDouble(m, f, i);
    case FieldDescriptor::CPPTYPE_FLOAT: return FloatAsDouble(r->GetRepeatedFloat(m, f, i));
    case FieldDescriptor::CPPTYPE_BOOL: return r->GetRepeatedBool(m, f, i);
    case FieldDescriptor::CPPTYPE_ENUM: return r->GetRepeatedEnum(m, f, i)->name();
    case FieldDescriptor::CPPTYPE_STRING: return r->GetRepeatedString(m, f, i);
    case FieldDescriptor::CPPTYPE_MESSAGE: return ProtoToJson(r->GetRepeatedMessage(m, f, i));
  }
  return nullptr;
}

}  // namespace

nlohmann::json ProtoToJson(const Message& message) {
  const auto* descriptor = message.GetDescriptor();
  const Reflection* reflection = message.GetReflection();
  nlohmann::json out = nlohmann::json::object();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const FieldDescriptor* field = descriptor->field(i);
    if (field->is_repeated()) {
      nlohmann::json list = nlohmann::json::array();
      const int size = reflection->FieldSize(message, field);
      for (int j = 0; j < size; ++j) list.push_back(RepeatedElement(message, reflection, field, j));
      out[field->name()] = std::move(list);
    } else if (field->has_presence() && !reflection->HasField(message, field)) {
      out[field->name()] = nullptr;
    } else {
      out[field->name()] = Scalar(message, reflection, field);
    }
  }
  return out;
}

}  // namespace dserve
