#include "model/checkpoint/model_config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "model/checkpoint/config_rules.h"
#include "model/util/logging.h"
#include "model/util/status_macros.h"

namespace dserve {
namespace {

using nlohmann::json;

constexpr const char* kProblemTypes[] = {"regression", "single_label_classification",
                                         "multi_label_classification"};

// The reader and the checks are shared with the families' rules (config_rules.h).
using FieldReader = ConfigFieldReader;
std::string Describe(const json& value) { return DescribeJson(value); }

std::optional<Task> TaskFromName(const std::string& name) {
  if (name == "classify") return Task::kClassify;
  if (name == "answer") return Task::kAnswer;
  if (name == "rerank") return Task::kRerank;
  if (name == "mlm") return Task::kMlm;
  return std::nullopt;
}

// The head family named by `architectures`, or nullopt when none is known.
// kClassify stands for DebertaV2ForSequenceClassification (classify or rerank).
std::optional<Task> ArchitectureTask(const std::vector<std::string>& architectures) {
  for (const std::string& arch : architectures) {
    if (arch.find("QuestionAnswering") != std::string::npos) return Task::kAnswer;
    if (arch.find("SequenceClassification") != std::string::npos) return Task::kClassify;
    if (arch.find("MaskedLM") != std::string::npos) return Task::kMlm;
  }
  return std::nullopt;
}

bool Contains(const std::vector<std::string>& list, const std::string& item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

std::vector<std::string> SplitBar(const std::string& text) {
  std::vector<std::string> parts;
  for (absl::string_view part : absl::StrSplit(text, '|')) {
    std::string item = absl::AsciiStrToLower(absl::StripAsciiWhitespace(part));
    if (!item.empty()) parts.push_back(item);
  }
  return parts;
}

absl::Status ParsePosAttType(FieldReader& reader, std::vector<std::string>* out) {
  const json* v = reader.Get("pos_att_type");
  out->clear();
  if (v == nullptr) return absl::OkStatus();
  std::vector<std::string> items;
  if (v->is_string()) {
    // Legacy form: "p2c|c2p" (transformers lowercases and splits it).
    items = SplitBar(v->get<std::string>());
  } else if (v->is_array()) {
    for (const json& item : *v) {
      if (!item.is_string()) {
        return reader.Error("pos_att_type",
                            absl::StrCat("entries must be strings, got ", Describe(item)));
      }
      items.push_back(item.get<std::string>());
    }
  } else {
    return reader.Error("pos_att_type",
                        absl::StrCat("must be a list such as [\"p2c\", \"c2p\"] or a string "
                                     "such as \"p2c|c2p\", got ",
                                     Describe(*v)));
  }
  for (const std::string& item : items) {
    if (std::find(out->begin(), out->end(), item) == out->end()) out->push_back(item);
  }
  return absl::OkStatus();
}

// Labels of a classification head: far beyond any intent or ticket-routing
// set, and small enough that a config alone cannot make the loader allocate
// without bound (a fuzzed `"num_labels": 99991948` made it build 100M default
// names, 1.5 GB).
constexpr int64_t kMaxLabels = 100000;

absl::Status ParseLabels(FieldReader& reader, ModelConfig* config) {
  config->id2label.clear();
  if (const json* v = reader.Get("id2label")) {
    if (!v->is_object()) {
      return reader.Error("id2label", absl::StrCat("must be an object mapping \"0\" to a label, got ",
                                                   Describe(*v)));
    }
    for (auto it = v->begin(); it != v->end(); ++it) {
      int64_t id = 0;
      if (!absl::SimpleAtoi(it.key(), &id) || id < 0) {
        return reader.Error("id2label", absl::StrCat("key \"", it.key(),
                                                     "\" is not a non-negative integer"));
      }
      if (id >= kMaxLabels) {
        return reader.Error("id2label", absl::StrCat("id ", id, " is over the limit of ", kMaxLabels, " labels"));
      }
      if (!it.value().is_string()) {
        return reader.Error("id2label", absl::StrCat("value for \"", it.key(),
                                                     "\" must be a string, got ",
                                                     Describe(it.value())));
      }
      if (!config->id2label.emplace(id, it.value().get<std::string>()).second) {
        return reader.Error("id2label", absl::StrCat("has id ", id, " twice"));
      }
    }
  }
  int64_t num_labels = -1;
  RETURN_IF_ERROR(reader.Int("num_labels", &num_labels));
  if (reader.Has("num_labels") && num_labels <= 0) {
    return reader.Error("num_labels", absl::StrCat("must be positive, got ", num_labels));
  }
  if (num_labels > kMaxLabels) {
    return reader.Error("num_labels", absl::StrCat(num_labels, " is over the limit of ", kMaxLabels, " labels"));
  }
  std::map<std::string, int64_t> label2id;
  bool has_label2id = false;
  if (const json* v = reader.Get("label2id")) {
    if (!v->is_object()) {
      return reader.Error("label2id", absl::StrCat("must be an object mapping a label to its id, got ",
                                                   Describe(*v)));
    }
    has_label2id = true;
    for (auto it = v->begin(); it != v->end(); ++it) {
      if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0) {
        return reader.Error("label2id", absl::StrCat("value for \"", it.key(),
                                                     "\" must be a non-negative integer, got ",
                                                     Describe(it.value())));
      }
      if (it.value().get<int64_t>() >= kMaxLabels) {
        return reader.Error("label2id", absl::StrCat("id ", it.value().get<int64_t>(), " is over the limit of ",
                                                     kMaxLabels, " labels"));
      }
      label2id[it.key()] = it.value().get<int64_t>();
    }
  }
  auto logger = Logger("checkpoint");
  if (!config->id2label.empty()) {
    // transformers: id2label wins over num_labels (with a warning).
    if (num_labels > 0 && num_labels != static_cast<int64_t>(config->id2label.size())) {
      logger->warn("config: num_labels ({}) disagrees with id2label ({} labels); using id2label",
                   num_labels, config->id2label.size());
    }
  } else if (num_labels > 0) {
    for (int64_t i = 0; i < num_labels; ++i) config->id2label[i] = absl::StrCat("LABEL_", i);
  } else if (has_label2id) {
    // Not what transformers does (it would make LABEL_0, LABEL_1), but a
    // file with only label2id clearly means these labels.
    for (const auto& [label, id] : label2id) {
      if (!config->id2label.emplace(id, label).second) {
        return reader.Error("label2id", absl::StrCat("has id ", id, " twice"));
      }
    }
    return absl::OkStatus();
  } else {
    // transformers' PretrainedConfig default: two labels.
    config->id2label = {{0, "LABEL_0"}, {1, "LABEL_1"}};
  }
  if (has_label2id) {
    std::map<std::string, int64_t> expected;
    for (const auto& [id, label] : config->id2label) expected[label] = id;
    if (expected != label2id) {
      logger->warn("config: label2id disagrees with id2label; label2id is rewritten from id2label");
    }
  }
  return absl::OkStatus();
}

absl::Status ParseQa(const json& object, const std::string& scope, QaSettings* qa) {
  FieldReader reader(object, scope, "dserve.qa.");
  RETURN_IF_ERROR(reader.Int32("doc_stride", &qa->doc_stride));
  RETURN_IF_ERROR(reader.Int32("max_answer_tokens", &qa->max_answer_tokens));
  RETURN_IF_ERROR(reader.Int32("n_best", &qa->n_best));
  RETURN_IF_ERROR(reader.Double("null_score_diff_threshold", &qa->null_score_diff_threshold));
  json rest = reader.Unused();
  if (!rest.empty()) {
    // A typo here would silently change answers; refuse it.
    return reader.Error(rest.begin().key(),
                        "is not a known setting (known: doc_stride, max_answer_tokens, n_best, "
                        "null_score_diff_threshold)");
  }
  return absl::OkStatus();
}

absl::Status ParseDserve(const json& object, const std::string& scope, DserveSettings* out) {
  FieldReader reader(object, scope, "dserve.");
  std::string task;
  RETURN_IF_ERROR(reader.String("task", &task));
  if (reader.Has("task")) {
    out->task = TaskFromName(task);
    if (!out->task) {
      return reader.Error("task", absl::StrCat("must be one of classify, answer, rerank, mlm; got \"",
                                               task, "\""));
    }
  }
  int64_t max_length = out->max_length;
  RETURN_IF_ERROR(reader.Int("max_length", &max_length));
  if (max_length < 0 || max_length > std::numeric_limits<int>::max()) {
    return reader.Error("max_length", absl::StrCat("must be >= 0 (0 = max_position_embeddings), got ",
                                                   max_length));
  }
  out->max_length = static_cast<int>(max_length);
  if (const json* qa = reader.Get("qa")) {
    if (!qa->is_object()) {
      return reader.Error("qa", absl::StrCat("must be an object, got ", Describe(*qa)));
    }
    RETURN_IF_ERROR(ParseQa(*qa, scope, &out->qa));
  }
  RETURN_IF_ERROR(reader.Bool("share_layers", &out->share_layers));
  RETURN_IF_ERROR(reader.Double("temperature", &out->temperature));
  RETURN_IF_ERROR(reader.Object("eval_metrics", &out->eval_metrics));
  RETURN_IF_ERROR(reader.Object("training", &out->training));
  out->extra = reader.Unused();
  return absl::OkStatus();
}

absl::Status ParseArchitectures(FieldReader& reader, std::vector<std::string>* out) {
  const json* v = reader.Get("architectures");
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_array()) {
    return reader.Error("architectures", absl::StrCat("must be a list of strings, got ", Describe(*v)));
  }
  for (const json& item : *v) {
    if (!item.is_string()) {
      return reader.Error("architectures",
                          absl::StrCat("entries must be strings, got ", Describe(item)));
    }
    out->push_back(item.get<std::string>());
  }
  return absl::OkStatus();
}

absl::StatusOr<ModelConfig> Parse(const json& json_config, const std::string& scope) {
  if (!json_config.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(scope, ": must hold a JSON object, got ", Describe(json_config)));
  }
  ModelConfig c;
  FieldReader r(json_config, scope, "");
  RETURN_IF_ERROR(r.String("model_type", &c.model_type));
  // The family's rules (model/family/config_registry.cc). An unknown
  // model_type is read with the first family's (ModelConfig's defaults), and
  // Validate() names it once the fields are read.
  const FamilyConfigRules* family = FindFamilyConfigRules(c.model_type);
  if (family != nullptr) c = family->defaults();
  const FamilyConfigRules& rules = family != nullptr ? *family : *FamilyConfigRegistry().front();
  // Shared keys the family's Hugging Face config lacks: kept in extra, unread.
  static const std::vector<std::string> kNoInertKeys;
  const std::vector<std::string>& inert = rules.inert_keys != nullptr ? rules.inert_keys() : kNoInertKeys;
  auto reads = [&inert](const char* key) { return !Contains(inert, key); };
  RETURN_IF_ERROR(ParseArchitectures(r, &c.architectures));
  RETURN_IF_ERROR(r.Int("vocab_size", &c.vocab_size));
  RETURN_IF_ERROR(r.Int("hidden_size", &c.hidden_size));
  RETURN_IF_ERROR(r.Int("num_hidden_layers", &c.num_hidden_layers));
  RETURN_IF_ERROR(r.Int("num_attention_heads", &c.num_attention_heads));
  RETURN_IF_ERROR(r.Int("intermediate_size", &c.intermediate_size));
  RETURN_IF_ERROR(r.String("hidden_act", &c.hidden_act));
  RETURN_IF_ERROR(r.Double("hidden_dropout_prob", &c.hidden_dropout_prob));
  RETURN_IF_ERROR(r.Double("attention_probs_dropout_prob", &c.attention_probs_dropout_prob));
  RETURN_IF_ERROR(r.Int("max_position_embeddings", &c.max_position_embeddings));
  RETURN_IF_ERROR(r.Int("type_vocab_size", &c.type_vocab_size));
  RETURN_IF_ERROR(r.Double("initializer_range", &c.initializer_range));
  RETURN_IF_ERROR(r.Double("layer_norm_eps", &c.layer_norm_eps));
  RETURN_IF_ERROR(r.Bool("relative_attention", &c.relative_attention));
  RETURN_IF_ERROR(r.Int("max_relative_positions", &c.max_relative_positions));
  RETURN_IF_ERROR(r.Int("pad_token_id", &c.pad_token_id));
  RETURN_IF_ERROR(r.Bool("position_biased_input", &c.position_biased_input));
  RETURN_IF_ERROR(ParsePosAttType(r, &c.pos_att_type));
  RETURN_IF_ERROR(r.Double("pooler_dropout", &c.pooler_dropout));
  RETURN_IF_ERROR(r.String("pooler_hidden_act", &c.pooler_hidden_act));
  RETURN_IF_ERROR(r.Int("pooler_hidden_size", &c.pooler_hidden_size));
  RETURN_IF_ERROR(r.Int("embedding_size", &c.embedding_size));
  if (reads("position_buckets")) RETURN_IF_ERROR(r.Int("position_buckets", &c.position_buckets));
  if (reads("share_att_key")) RETURN_IF_ERROR(r.Bool("share_att_key", &c.share_att_key));
  if (reads("norm_rel_ebd")) RETURN_IF_ERROR(r.String("norm_rel_ebd", &c.norm_rel_ebd));
  if (reads("attention_head_size")) {
    RETURN_IF_ERROR(r.Int("attention_head_size", &c.attention_head_size));
    if (r.Has("attention_head_size") && c.attention_head_size <= 0) {
      return r.Error("attention_head_size",
                     absl::StrCat("must be positive when given, got ", c.attention_head_size));
    }
  }
  if (reads("conv_kernel_size")) RETURN_IF_ERROR(r.Int("conv_kernel_size", &c.conv_kernel_size));
  if (reads("conv_groups")) RETURN_IF_ERROR(r.Int("conv_groups", &c.conv_groups));
  if (reads("conv_act")) RETURN_IF_ERROR(r.String("conv_act", &c.conv_act));
  if (rules.parse != nullptr) RETURN_IF_ERROR(rules.parse(r, &c));
  if (r.Has("cls_dropout")) {
    double cls_dropout = 0;
    RETURN_IF_ERROR(r.Double("cls_dropout", &cls_dropout));
    c.cls_dropout = cls_dropout;
  } else {
    r.Get("cls_dropout");  // a null cls_dropout means "unset"
  }
  RETURN_IF_ERROR(r.Bool("legacy", &c.legacy));
  RETURN_IF_ERROR(ParseLabels(r, &c));
  RETURN_IF_ERROR(r.String("problem_type", &c.problem_type));
  if (const json* dserve = r.Get("dserve")) {
    if (!dserve->is_object()) {
      return r.Error("dserve", absl::StrCat("must be an object, got ", Describe(*dserve)));
    }
    RETURN_IF_ERROR(ParseDserve(*dserve, scope, &c.dserve));
  }
  c.extra = r.Unused();

  // transformers: pooler_hidden_size and embedding_size default to hidden_size
  // (where the family's defaults left them 0).
  if (c.pooler_hidden_size == 0) c.pooler_hidden_size = c.hidden_size;
  if (c.embedding_size == 0) c.embedding_size = c.hidden_size;

  absl::Status status = c.Validate();
  if (!status.ok()) {
    // Validate() speaks of "config"; name the file we read instead.
    std::string message(status.message());
    const std::string prefix = "config: ";
    if (message.rfind(prefix, 0) == 0) message = message.substr(prefix.size());
    return absl::InvalidArgumentError(absl::StrCat(scope, ": ", message));
  }
  return c;
}

absl::Status Invalid(const std::string& field, const std::string& problem) {
  return InvalidConfigField(field, problem);
}

absl::Status CheckPositive(const char* field, int64_t value) { return CheckPositiveField(field, value); }

absl::Status CheckProbability(const char* field, double value) { return CheckProbabilityField(field, value); }

absl::Status CheckActivation(const char* field, const std::string& name) {
  if (!IsSupportedActivation(name)) {
    return Invalid(field, absl::StrCat("\"", name, "\" is not a supported activation (supported: ",
                                       absl::StrJoin(SupportedActivations(), ", "), ")"));
  }
  return absl::OkStatus();
}

// The family's own fields must be there exactly for its model_type; then the
// family's checks.
absl::Status ValidateModelType(const ModelConfig& c) {
  const FamilyConfigRules* family = FindFamilyConfigRules(c.model_type);
  if (family == nullptr) {
    return Invalid("model_type", absl::StrCat("\"", c.model_type, "\" is not supported (supported: ",
                                              absl::StrJoin(SupportedModelTypes(), ", "), ")"));
  }
  for (const FamilyConfigRules* rules : FamilyConfigRegistry()) {
    if (rules->has_own_fields != nullptr && (c.model_type == rules->model_type) != rules->has_own_fields(c)) {
      return Invalid("model_type", absl::StrCat("\"", c.model_type, "\" does not match the fields read"));
    }
  }
  return family->validate != nullptr ? family->validate(c) : absl::OkStatus();
}

absl::Status ValidateDserve(const ModelConfig& c) {
  const DserveSettings& d = c.dserve;
  if (d.max_length < 0) {
    return Invalid("dserve.max_length", absl::StrCat("must be >= 0, got ", d.max_length));
  }
  if (c.position_biased_input && d.max_length > c.max_position_embeddings) {
    return Invalid("dserve.max_length",
                   absl::StrCat("(", d.max_length, ") exceeds max_position_embeddings (",
                                c.max_position_embeddings,
                                ") of a model with absolute position embeddings"));
  }
  if (d.qa.doc_stride < 0) {
    return Invalid("dserve.qa.doc_stride", absl::StrCat("must be >= 0, got ", d.qa.doc_stride));
  }
  if (d.qa.max_answer_tokens <= 0) {
    return Invalid("dserve.qa.max_answer_tokens",
                   absl::StrCat("must be positive, got ", d.qa.max_answer_tokens));
  }
  if (d.qa.n_best <= 0) {
    return Invalid("dserve.qa.n_best", absl::StrCat("must be positive, got ", d.qa.n_best));
  }
  if (!std::isfinite(d.qa.null_score_diff_threshold)) {
    return Invalid("dserve.qa.null_score_diff_threshold", "must be finite");
  }
  if (!(d.temperature > 0.0) || !std::isfinite(d.temperature)) {
    return Invalid("dserve.temperature",
                   absl::StrCat("must be a positive number, got ", d.temperature));
  }
  if (!d.eval_metrics.is_object()) return Invalid("dserve.eval_metrics", "must be an object");
  if (!d.training.is_object()) return Invalid("dserve.training", "must be an object");
  if (!d.extra.is_object()) return Invalid("dserve", "extra keys must form an object");
  if (d.task) {
    std::optional<Task> arch = ArchitectureTask(c.architectures);
    const Task family = *d.task == Task::kRerank ? Task::kClassify : *d.task;
    if (*d.task == Task::kNone) return Invalid("dserve.task", "must not be \"none\"");
    if (arch && *arch != family) {
      return Invalid("dserve.task",
                     absl::StrCat("\"", TaskName(*d.task), "\" does not fit architectures [",
                                  absl::StrJoin(c.architectures, ", "), "]"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

const char* TaskName(Task task) {
  switch (task) {
    case Task::kClassify:
      return "classify";
    case Task::kAnswer:
      return "answer";
    case Task::kRerank:
      return "rerank";
    case Task::kMlm:
      return "mlm";
    case Task::kNone:
      return "none";
  }
  return "none";
}

const std::vector<std::string>& SupportedModelTypes() {
  static const std::vector<std::string>* types = [] {
    auto* names = new std::vector<std::string>;
    for (const FamilyConfigRules* rules : FamilyConfigRegistry()) names->push_back(rules->model_type);
    return names;
  }();
  return *types;
}

const std::vector<std::string>& SupportedActivations() {
  static const std::vector<std::string>* names = new std::vector<std::string>{
      "gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh", "gelu_python", "relu",
      "tanh", "silu",     "swish",     "sigmoid",           "linear"};
  return *names;
}

bool IsSupportedActivation(const std::string& name) {
  return Contains(SupportedActivations(), name);
}

int64_t ModelConfig::head_size() const {
  if (attention_head_size > 0) return attention_head_size;
  return num_attention_heads > 0 ? hidden_size / num_attention_heads : 0;
}

int64_t ModelConfig::max_relative() const {
  return max_relative_positions >= 1 ? max_relative_positions : max_position_embeddings;
}

int64_t ModelConfig::att_span() const {
  return position_buckets > 0 ? position_buckets : max_relative();
}

bool ModelConfig::has_c2p() const { return Contains(pos_att_type, "c2p"); }
bool ModelConfig::has_p2c() const { return Contains(pos_att_type, "p2c"); }

bool ModelConfig::norm_rel_embeddings() const {
  return Contains(SplitBar(norm_rel_ebd), "layer_norm");
}

int64_t ModelConfig::embedding_dim() const {
  return embedding_size > 0 ? embedding_size : hidden_size;
}

Task ModelConfig::task() const {
  if (dserve.task) return *dserve.task;
  std::optional<Task> arch = ArchitectureTask(architectures);
  if (!arch) return Task::kNone;
  if (*arch == Task::kClassify && num_labels() == 1) return Task::kRerank;
  return *arch;
}

std::vector<std::string> ModelConfig::labels() const {
  std::vector<std::string> out;
  const int64_t n = num_labels();
  out.reserve(n);
  for (int64_t i = 0; i < n; ++i) {
    auto it = id2label.find(i);
    out.push_back(it != id2label.end() ? it->second : absl::StrCat("LABEL_", i));
  }
  return out;
}

int64_t ModelConfig::max_sequence_length() const {
  return dserve.max_length > 0 ? dserve.max_length : max_position_embeddings;
}

absl::StatusOr<ModelConfig> ModelConfig::FromJson(const nlohmann::json& json) {
  return Parse(json, "config.json");
}

absl::StatusOr<ModelConfig> ModelConfig::FromJsonText(const std::string& text) {
  return FromJsonText(text, "config.json");
}

absl::StatusOr<ModelConfig> ModelConfig::FromJsonText(const std::string& text,
                                                      const std::string& source) {
  nlohmann::json parsed;
  try {
    parsed = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": not valid JSON: ", e.what()));
  }
  return Parse(parsed, source);
}

absl::StatusOr<ModelConfig> ModelConfig::FromFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot open config file"));
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": read error"));
  return FromJsonText(buffer.str(), path);
}

absl::Status ModelConfig::Validate() const {
  RETURN_IF_ERROR(ValidateModelType(*this));
  RETURN_IF_ERROR(CheckPositive("vocab_size", vocab_size));
  RETURN_IF_ERROR(CheckPositive("hidden_size", hidden_size));
  RETURN_IF_ERROR(CheckPositive("num_hidden_layers", num_hidden_layers));
  RETURN_IF_ERROR(CheckPositive("num_attention_heads", num_attention_heads));
  RETURN_IF_ERROR(CheckPositive("intermediate_size", intermediate_size));
  RETURN_IF_ERROR(CheckPositive("max_position_embeddings", max_position_embeddings));
  if (type_vocab_size < 0) {
    return Invalid("type_vocab_size", absl::StrCat("must be >= 0, got ", type_vocab_size));
  }
  if (embedding_size < 0) {
    return Invalid("embedding_size", absl::StrCat("must be positive, got ", embedding_size));
  }
  if (pooler_hidden_size < 0 || (pooler_hidden_size != 0 && pooler_hidden_size != hidden_size)) {
    return Invalid("pooler_hidden_size",
                   absl::StrCat("(", pooler_hidden_size, ") must equal hidden_size (", hidden_size,
                                "): the classifier reads the pooler output"));
  }
  if (attention_head_size < 0) {
    return Invalid("attention_head_size", absl::StrCat("must be positive, got ", attention_head_size));
  }
  if (attention_head_size == 0 && hidden_size % num_attention_heads != 0) {
    return Invalid("num_attention_heads",
                   absl::StrCat("(", num_attention_heads, ") does not divide hidden_size (",
                                hidden_size, ")"));
  }
  RETURN_IF_ERROR(CheckActivation("hidden_act", hidden_act));
  RETURN_IF_ERROR(CheckActivation("pooler_hidden_act", pooler_hidden_act));
  RETURN_IF_ERROR(CheckActivation("conv_act", conv_act));
  RETURN_IF_ERROR(CheckProbability("hidden_dropout_prob", hidden_dropout_prob));
  RETURN_IF_ERROR(CheckProbability("attention_probs_dropout_prob", attention_probs_dropout_prob));
  RETURN_IF_ERROR(CheckProbability("pooler_dropout", pooler_dropout));
  if (cls_dropout) RETURN_IF_ERROR(CheckProbability("cls_dropout", *cls_dropout));
  if (!(layer_norm_eps > 0.0) || !std::isfinite(layer_norm_eps)) {
    return Invalid("layer_norm_eps", absl::StrCat("must be positive, got ", layer_norm_eps));
  }
  if (!(initializer_range >= 0.0) || !std::isfinite(initializer_range)) {
    return Invalid("initializer_range", absl::StrCat("must be >= 0, got ", initializer_range));
  }
  if (pad_token_id < 0 || pad_token_id >= vocab_size) {
    return Invalid("pad_token_id", absl::StrCat("(", pad_token_id, ") must be in [0, vocab_size = ",
                                                vocab_size, ")"));
  }
  for (const std::string& item : pos_att_type) {
    if (item != "c2p" && item != "p2c") {
      return Invalid("pos_att_type",
                     absl::StrCat("entry \"", item, "\" is unknown (allowed: c2p, p2c)"));
    }
  }
  for (const std::string& item : SplitBar(norm_rel_ebd)) {
    if (item != "none" && item != "layer_norm") {
      return Invalid("norm_rel_ebd",
                     absl::StrCat("entry \"", item, "\" is unknown (allowed: none, layer_norm)"));
    }
  }
  if (conv_kernel_size < 0) {
    return Invalid("conv_kernel_size", absl::StrCat("must be >= 0, got ", conv_kernel_size));
  }
  if (conv_kernel_size > 0) {
    if (conv_kernel_size % 2 == 0) {
      return Invalid("conv_kernel_size",
                     absl::StrCat("must be odd (padding (k-1)/2 keeps the length), got ",
                                  conv_kernel_size));
    }
    if (conv_groups <= 0 || hidden_size % conv_groups != 0) {
      return Invalid("conv_groups", absl::StrCat("(", conv_groups,
                                                 ") must be positive and divide hidden_size (",
                                                 hidden_size, ")"));
    }
  }
  if (!id2label.empty()) {
    if (id2label.begin()->first != 0 ||
        id2label.rbegin()->first != static_cast<int64_t>(id2label.size()) - 1) {
      return Invalid("id2label", absl::StrCat("ids must be 0..", id2label.size() - 1,
                                              " without gaps, got ids up to ",
                                              id2label.rbegin()->first));
    }
  }
  if (!problem_type.empty() &&
      std::find(std::begin(kProblemTypes), std::end(kProblemTypes), problem_type) ==
          std::end(kProblemTypes)) {
    return Invalid("problem_type",
                   absl::StrCat("\"", problem_type, "\" is unknown (allowed: ",
                                absl::StrJoin(kProblemTypes, ", "), ")"));
  }
  if (!extra.is_object()) return Invalid("extra", "must be an object");
  return ValidateDserve(*this);
}

nlohmann::json ModelConfig::ToJson() const {
  nlohmann::json j = extra.is_object() ? extra : nlohmann::json::object();
  j["model_type"] = model_type;
  if (!architectures.empty()) j["architectures"] = architectures;
  j["vocab_size"] = vocab_size;
  j["hidden_size"] = hidden_size;
  j["num_hidden_layers"] = num_hidden_layers;
  j["num_attention_heads"] = num_attention_heads;
  j["intermediate_size"] = intermediate_size;
  j["hidden_act"] = hidden_act;
  j["hidden_dropout_prob"] = hidden_dropout_prob;
  j["attention_probs_dropout_prob"] = attention_probs_dropout_prob;
  j["max_position_embeddings"] = max_position_embeddings;
  j["type_vocab_size"] = type_vocab_size;
  j["initializer_range"] = initializer_range;
  j["layer_norm_eps"] = layer_norm_eps;
  // The keys of the family whose own fields this config carries, else of the
  // first family (DeBERTa-v2: ModelConfig's own fields); model/family/config_registry.cc.
  const FamilyConfigRules* family = FamilyConfigRegistry().front();
  for (const FamilyConfigRules* rules : FamilyConfigRegistry()) {
    if (rules->has_own_fields != nullptr && rules->has_own_fields(*this)) {
      family = rules;
      break;
    }
  }
  family->to_json(*this, &j);
  if (cls_dropout) j["cls_dropout"] = *cls_dropout;
  nlohmann::json id2label_json = nlohmann::json::object();
  nlohmann::json label2id_json = nlohmann::json::object();
  const std::vector<std::string> names = labels();
  for (size_t i = 0; i < names.size(); ++i) {
    id2label_json[std::to_string(i)] = names[i];
    label2id_json[names[i]] = i;
  }
  j["id2label"] = id2label_json;
  j["label2id"] = label2id_json;
  if (!problem_type.empty()) j["problem_type"] = problem_type;

  nlohmann::json d = dserve.extra.is_object() ? dserve.extra : nlohmann::json::object();
  if (dserve.task) d["task"] = TaskName(*dserve.task);
  d["max_length"] = dserve.max_length;
  d["qa"] = {{"doc_stride", dserve.qa.doc_stride},
             {"max_answer_tokens", dserve.qa.max_answer_tokens},
             {"n_best", dserve.qa.n_best},
             {"null_score_diff_threshold", dserve.qa.null_score_diff_threshold}};
  d["share_layers"] = dserve.share_layers;
  d["temperature"] = dserve.temperature;
  d["eval_metrics"] = dserve.eval_metrics;
  d["training"] = dserve.training;
  j["dserve"] = d;
  return j;
}

}  // namespace dserve
