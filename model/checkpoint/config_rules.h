// The extension point of ModelConfig's parser (model_config.cc): one family's
// config.json rules, and the reader they use. model_config.cc parses and
// checks the fields every family shares (ModelConfig's) and looks the family
// up by model_type in FamilyConfigRegistry(); the family's rules (its
// Hugging Face defaults, its own fields, its checks, the keys it writes)
// live in its folder (model/deberta/deberta_config.cc,
// model/albert/albert_config.cc, model/deberta_v1/deberta_v1_config.cc).
//
// The registry table is model/family/config_registry.cc: the one file that
// names every family's rules. It is compiled into dserve_checkpoint with the
// families' config sources (all torch-free), so that ModelConfig::FromJson
// never misses a family, whatever the binary links.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "model/checkpoint/model_config.h"

namespace dserve {

// A short rendering of a JSON value for error messages ("string \"abc\"";
// longer than 40 characters: cut, with "...").
std::string DescribeJson(const nlohmann::json& value);

// Reads typed fields of one JSON object, remembering which keys were used so
// that the rest can be kept verbatim (Unused). `scope` prefixes error
// messages ("config.json" or "/path/config.json"), `prefix` prefixes field
// names ("dserve.qa."). Null means absent for every accessor: the output is
// left as it was.
class ConfigFieldReader {
 public:
  ConfigFieldReader(const nlohmann::json& object, std::string scope, std::string prefix)
      : object_(object), scope_(std::move(scope)), prefix_(std::move(prefix)) {}

  // Returns the value of `key`, or nullptr when absent or null. Marks it used.
  const nlohmann::json* Get(const std::string& key);
  bool Has(const std::string& key) const;

  // InvalidArgument "<scope>: <prefix><key> <problem>".
  absl::Status Error(const std::string& key, const std::string& problem) const;

  absl::Status Int(const std::string& key, int64_t* out);
  absl::Status Int32(const std::string& key, int* out);
  absl::Status Double(const std::string& key, double* out);
  absl::Status Bool(const std::string& key, bool* out);
  absl::Status String(const std::string& key, std::string* out);
  absl::Status Object(const std::string& key, nlohmann::json* out);

  // Keys not read by any accessor, in the object's order.
  nlohmann::json Unused() const;

 private:
  const nlohmann::json& object_;
  std::string scope_;
  std::string prefix_;
  std::set<std::string> used_;
};

// Validation helpers shared by ModelConfig::Validate and the families' checks.
// Errors are InvalidArgument "config: <field> <problem>" (the parser replaces
// "config" with the file it read).
absl::Status InvalidConfigField(const std::string& field, const std::string& problem);
absl::Status CheckPositiveField(const char* field, int64_t value);
absl::Status CheckProbabilityField(const char* field, double value);

// One family's config.json rules. Every function pointer but `defaults` and
// `to_json` may be null (nothing to do).
struct FamilyConfigRules {
  const char* model_type;  // config.json's model_type
  // The family's Hugging Face defaults (its PretrainedConfig's __init__),
  // model_type set, its own fields (ModelConfig::albert, ::deberta_v1, ...)
  // present.
  ModelConfig (*defaults)();
  // ModelConfig's shared keys that this family's Hugging Face config does not
  // have: the shared parser leaves them unread (kept in extra, written back
  // unchanged), the field keeps its default.
  const std::vector<std::string>& (*inert_keys)();
  // Reads the family's own fields from `reader` (the whole config.json),
  // after the shared ones and before dserve's settings. Errors name the
  // field through reader.Error.
  absl::Status (*parse)(ConfigFieldReader& reader, ModelConfig* c);
  // Whether `c` carries this family's own fields (checked against model_type:
  // "does not match the fields read").
  bool (*has_own_fields)(const ModelConfig& c);
  // The family's checks, before the shared ones. Errors start with
  // "config: <field>".
  absl::Status (*validate)(const ModelConfig& c);
  // Writes the family's keys into `j` (a config.json its Hugging Face config
  // class loads), beside the shared ones ModelConfig::ToJson wrote.
  void (*to_json)(const ModelConfig& c, nlohmann::json* j);
};

// Every family's rules, in the order error messages list model types
// ("supported: deberta-v2, albert, deberta"). The first one (DeBERTa-v2,
// ModelConfig's own defaults) also parses a file whose model_type is unknown,
// so that its field errors come first and Validate() then names the type.
// Defined in model/family/config_registry.cc.
const std::vector<const FamilyConfigRules*>& FamilyConfigRegistry();

// The rules of `model_type`, or nullptr when no family has it.
const FamilyConfigRules* FindFamilyConfigRules(const std::string& model_type);

}  // namespace dserve
