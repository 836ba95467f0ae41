#include "model/checkpoint/config_rules.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "model/util/status_macros.h"

namespace dserve {

using nlohmann::json;

std::string DescribeJson(const json& value) {
  std::string text = value.dump();
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return absl::StrCat(value.type_name(), " ", text);
}

const json* ConfigFieldReader::Get(const std::string& key) {
  used_.insert(key);
  auto it = object_.find(key);
  if (it == object_.end() || it->is_null()) return nullptr;
  return &*it;
}

bool ConfigFieldReader::Has(const std::string& key) const {
  auto it = object_.find(key);
  return it != object_.end() && !it->is_null();
}

absl::Status ConfigFieldReader::Error(const std::string& key, const std::string& problem) const {
  return absl::InvalidArgumentError(absl::StrCat(scope_, ": ", prefix_, key, " ", problem));
}

absl::Status ConfigFieldReader::Int(const std::string& key, int64_t* out) {
  const json* v = Get(key);
  if (v == nullptr) return absl::OkStatus();
  if (v->is_number_unsigned()) {
    uint64_t u = v->get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Error(key, absl::StrCat("is out of range (", v->dump(), ")"));
    }
    *out = static_cast<int64_t>(u);
    return absl::OkStatus();
  }
  if (v->is_number_integer()) {
    *out = v->get<int64_t>();
    return absl::OkStatus();
  }
  return Error(key, absl::StrCat("must be an integer, got ", DescribeJson(*v)));
}

absl::Status ConfigFieldReader::Int32(const std::string& key, int* out) {
  int64_t value = *out;
  RETURN_IF_ERROR(Int(key, &value));
  if (value < std::numeric_limits<int>::min() || value > std::numeric_limits<int>::max()) {
    return Error(key, absl::StrCat("is out of range (", value, ")"));
  }
  *out = static_cast<int>(value);
  return absl::OkStatus();
}

absl::Status ConfigFieldReader::Double(const std::string& key, double* out) {
  const json* v = Get(key);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_number()) return Error(key, absl::StrCat("must be a number, got ", DescribeJson(*v)));
  *out = v->get<double>();
  return absl::OkStatus();
}

absl::Status ConfigFieldReader::Bool(const std::string& key, bool* out) {
  const json* v = Get(key);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_boolean()) {
    return Error(key, absl::StrCat("must be true or false, got ", DescribeJson(*v)));
  }
  *out = v->get<bool>();
  return absl::OkStatus();
}

absl::Status ConfigFieldReader::String(const std::string& key, std::string* out) {
  const json* v = Get(key);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_string()) return Error(key, absl::StrCat("must be a string, got ", DescribeJson(*v)));
  *out = v->get<std::string>();
  return absl::OkStatus();
}

absl::Status ConfigFieldReader::Object(const std::string& key, json* out) {
  const json* v = Get(key);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_object()) return Error(key, absl::StrCat("must be an object, got ", DescribeJson(*v)));
  *out = *v;
  return absl::OkStatus();
}

json ConfigFieldReader::Unused() const {
  json rest = json::object();
  for (auto it = object_.begin(); it != object_.end(); ++it) {
    if (used_.count(it.key()) == 0) rest[it.key()] = it.value();
  }
  return rest;
}

absl::Status InvalidConfigField(const std::string& field, const std::string& problem) {
  return absl::InvalidArgumentError(absl::StrCat("config: ", field, " ", problem));
}

absl::Status CheckPositiveField(const char* field, int64_t value) {
  if (value <= 0) return InvalidConfigField(field, absl::StrCat("must be positive, got ", value));
  return absl::OkStatus();
}

absl::Status CheckProbabilityField(const char* field, double value) {
  if (!(value >= 0.0 && value <= 1.0)) {
    return InvalidConfigField(field, absl::StrCat("must be in [0, 1], got ", value));
  }
  return absl::OkStatus();
}

const FamilyConfigRules* FindFamilyConfigRules(const std::string& model_type) {
  for (const FamilyConfigRules* rules : FamilyConfigRegistry()) {
    if (model_type == rules->model_type) return rules;
  }
  return nullptr;
}

}  // namespace dserve
