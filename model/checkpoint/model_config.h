// ModelConfig: a Hugging Face config.json of one of the model families we
// serve (model_type "deberta-v2", DebertaV2Config; "albert", AlbertConfig;
// "deberta", DeBERTa v1's DebertaConfig), plus dserve's own settings under
// the "dserve" key. Parsing applies the family's Hugging Face defaults and
// validates; serialisation writes a config.json that Hugging Face can load
// (unknown keys read from a file are kept and written back unchanged).
//
// The fields every family shares are parsed and checked here
// (model_config.cc); each family's rules (defaults, own fields, checks, the
// keys it writes) live in its folder behind the registry of
// model/family/config_registry.cc (config_rules.h). The family's own fields
// are data here (AlbertFields, DebertaV1Fields), so that ModelConfig stays
// one value type.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"

namespace dserve {

// The task a checkpoint serves. kMlm is for pretraining checkpoints.
enum class Task { kClassify, kAnswer, kRerank, kMlm, kNone };
const char* TaskName(Task task);  // "classify", "answer", "rerank", "mlm", "none"

// Activation names accepted for hidden_act, pooler_hidden_act and conv_act
// (a subset of transformers' ACT2FN): gelu, gelu_new, gelu_fast,
// gelu_pytorch_tanh, gelu_python, relu, tanh, silu, swish, sigmoid, linear. Case-sensitive, as
// in transformers.
const std::vector<std::string>& SupportedActivations();
bool IsSupportedActivation(const std::string& name);

// Extractive-QA settings stored under dserve.qa.
struct QaSettings {
  int doc_stride = 128;                    // tokens of overlap between windows
  int max_answer_tokens = 30;              // longest span considered
  int n_best = 20;                         // start/end candidates per window
  double null_score_diff_threshold = 0.0;  // answer "" when null - best > this
};

// Our additions, under the "dserve" key of config.json.
struct DserveSettings {
  std::optional<Task> task;   // overrides the task derived from architectures
  int max_length = 0;         // tokens per sequence served; 0 = max_position_embeddings
  QaSettings qa;
  bool share_layers = false;  // ALBERT-style: every layer uses layer 0's weights
  double temperature = 1.0;   // calibration: logits are divided by this
  nlohmann::json eval_metrics = nlohmann::json::object();  // metrics at save time
  nlohmann::json training = nlohmann::json::object();      // training settings
  nlohmann::json extra = nlohmann::json::object();         // other keys, kept as read
};

// The model_type values we read ("deberta-v2", "albert", "deberta").
const std::vector<std::string>& SupportedModelTypes();

// transformers AlbertConfig's own fields (model_type "albert"; rules in
// model/albert/albert_config.cc). The shared
// fields (sizes, hidden_act, layer_norm_eps, ...) are ModelConfig's, with
// AlbertConfig's defaults when the file leaves them out.
struct AlbertFields {
  int64_t num_hidden_groups = 1;  // parameter groups; layer i uses group i / (layers / groups)
  int64_t inner_group_num = 1;    // layers (own parameters) in each group
  double classifier_dropout_prob = 0.1;
  std::string position_embedding_type = "absolute";  // the only one we implement
};

// transformers DebertaConfig's fields that DebertaV2Config lacks (model_type
// "deberta", DeBERTa v1; rules in model/deberta_v1/deberta_v1_config.cc).
struct DebertaV1Fields {
  // Talking-heads attention: head_logits_proj mixes the heads' scores before
  // the softmax, head_weights_proj their probabilities after it ([heads,
  // heads] each, no bias). Not a DebertaConfig argument; HF reads it with
  // getattr(config, "talking_head", False).
  bool talking_head = false;
};

struct ModelConfig {
  // --- Hugging Face config fields (DebertaV2Config defaults; for
  //     model_type "albert", AlbertConfig's where they differ) ---
  std::string model_type = "deberta-v2";
  std::vector<std::string> architectures;
  int64_t vocab_size = 128100;
  int64_t hidden_size = 1536;
  int64_t num_hidden_layers = 24;
  int64_t num_attention_heads = 24;
  int64_t intermediate_size = 6144;
  std::string hidden_act = "gelu";  // gelu | gelu_new | gelu_fast | relu | tanh | silu/swish
  double hidden_dropout_prob = 0.1;
  double attention_probs_dropout_prob = 0.1;
  int64_t max_position_embeddings = 512;
  int64_t type_vocab_size = 0;
  double initializer_range = 0.02;
  double layer_norm_eps = 1e-7;
  bool relative_attention = false;
  int64_t max_relative_positions = -1;
  int64_t pad_token_id = 0;
  bool position_biased_input = true;
  std::vector<std::string> pos_att_type;  // subset of {"c2p", "p2c"}
  double pooler_dropout = 0.0;
  std::string pooler_hidden_act = "gelu";
  int64_t pooler_hidden_size = 0;   // 0 in the file = hidden_size (resolved on parse)
  int64_t embedding_size = 0;       // 0 in the file = hidden_size (resolved on parse)
  int64_t position_buckets = -1;
  bool share_att_key = false;
  std::string norm_rel_ebd = "none";  // "none" or contains "layer_norm"
  int64_t attention_head_size = 0;    // 0 = hidden_size / num_attention_heads
  int64_t conv_kernel_size = 0;
  int64_t conv_groups = 1;
  std::string conv_act = "tanh";
  std::optional<double> cls_dropout;
  bool legacy = true;  // MaskedLM head layout (REFERENCE §6)
  std::map<int64_t, std::string> id2label;  // also gives num_labels
  std::string problem_type;  // "", single_label_classification, multi_label_classification, regression
  std::optional<AlbertFields> albert;  // set exactly when model_type == "albert"
  // Set exactly when model_type == "deberta" (DeBERTa v1). Its config keeps
  // v1's meaning in the shared fields: no position buckets, no shared keys,
  // no relative-table LayerNorm, no ConvLayer (deberta_v1_config.h).
  std::optional<DebertaV1Fields> deberta_v1;
  DserveSettings dserve;
  nlohmann::json extra = nlohmann::json::object();  // unknown top-level keys, kept as read

  // --- derived values (REFERENCE §1) ---
  int64_t num_labels() const { return id2label.empty() ? 2 : static_cast<int64_t>(id2label.size()); }
  int64_t head_size() const;     // attention_head_size or hidden/heads
  int64_t embedding_dim() const;  // embedding_size, or hidden_size when 0
  int64_t max_relative() const;  // max_relative_positions if >= 1 else max_position_embeddings
  int64_t att_span() const;      // position_buckets if > 0 else max_relative()
  bool has_c2p() const;
  bool has_p2c() const;
  bool norm_rel_embeddings() const;  // norm_rel_ebd contains "layer_norm"
  // The task served: dserve.task if set, else from architectures
  // (QuestionAnswering -> answer; SequenceClassification -> rerank when
  // num_labels == 1, else classify; MaskedLM -> mlm).
  Task task() const;
  // Labels in id order ("LABEL_i" for ids missing from id2label).
  std::vector<std::string> labels() const;
  // Longest sequence (tokens, specials included) the model accepts: dserve.max_length
  // if set, else max_position_embeddings.
  int64_t max_sequence_length() const;

  // Parses config.json text. Applies defaults, resolves derived fields, then
  // Validate(). Errors (InvalidArgument) name the field ("config.json:
  // num_attention_heads (5) does not divide hidden_size (96)").
  //
  // Parsing rules beyond transformers' defaults:
  // - a wrong JSON type is an error ("hidden_size must be an integer, got
  //   string \"abc\""); null means "absent" for every field;
  // - pos_att_type: a list, or the legacy "p2c|c2p" string (lowercased,
  //   split on '|'); duplicates dropped; entries must be c2p or p2c;
  // - labels: id2label keys are strings of ints and must be 0..N-1; with no
  //   id2label, num_labels N gives LABEL_0..LABEL_{N-1}; with neither, a
  //   label2id alone is inverted; otherwise LABEL_0, LABEL_1 (transformers'
  //   default). num_labels disagreeing with id2label, or label2id disagreeing
  //   with id2label, is logged (transformers lets id2label win) and ToJson
  //   writes label2id from id2label;
  // - dserve.qa accepts only its known keys (a typo would silently change
  //   answers); other unknown keys, top-level or under "dserve", are kept.
  static absl::StatusOr<ModelConfig> FromJson(const nlohmann::json& json);
  static absl::StatusOr<ModelConfig> FromJsonText(const std::string& text);
  // Same, with errors prefixed by `source` (a path) instead of "config.json".
  static absl::StatusOr<ModelConfig> FromJsonText(const std::string& text,
                                                  const std::string& source);
  // Errors name `path`; NotFound when it cannot be opened.
  static absl::StatusOr<ModelConfig> FromFile(const std::string& path);

  // Checks every field; the error names the field and the allowed values.
  absl::Status Validate() const;

  // A config.json that Hugging Face's DebertaV2Config loads; our settings
  // under "dserve"; keys kept from the input file written back.
  nlohmann::json ToJson() const;
};

}  // namespace dserve
