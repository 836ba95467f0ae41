// libFuzzer target: config.json text through ModelConfig::FromJsonText
// (parse, Hugging Face defaults, validation). Errors must be
// INVALID_ARGUMENT naming config.json; an accepted config must survive what
// a checkpoint save does: ToJson, dump, parse again, and give the same JSON.
#include <cstddef>
#include <cstdint>
#include <string>

#include "model/checkpoint/model_config.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  dserve::fuzz::QuietLogs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using dserve::ModelConfig;
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto config = ModelConfig::FromJsonText(text);
  if (!config.ok()) {
    FUZZ_CHECK(config.status().code() == absl::StatusCode::kInvalidArgument, "unexpected code: %s",
               config.status().ToString().c_str());
    FUZZ_CHECK(config.status().message().rfind("config.json: ", 0) == 0, "error does not name the file: %s",
               config.status().ToString().c_str());
    return 0;
  }
  FUZZ_CHECK(config->Validate().ok(), "accepted config fails Validate: %s",
             config->Validate().ToString().c_str());
  // The derived values the model and the server read.
  FUZZ_CHECK(config->head_size() > 0, "head_size %lld", static_cast<long long>(config->head_size()));
  FUZZ_CHECK(config->embedding_dim() > 0, "embedding_dim %lld", static_cast<long long>(config->embedding_dim()));
  FUZZ_CHECK(config->max_sequence_length() > 0, "max_sequence_length %lld",
             static_cast<long long>(config->max_sequence_length()));
  FUZZ_CHECK(static_cast<int64_t>(config->labels().size()) == config->num_labels(), "labels %zu vs num_labels %lld",
             config->labels().size(), static_cast<long long>(config->num_labels()));
  (void)config->task();
  (void)config->att_span();
  (void)config->norm_rel_embeddings();

  const nlohmann::json saved = config->ToJson();
  const std::string saved_text = saved.dump(2);
  auto reloaded = ModelConfig::FromJsonText(saved_text);
  FUZZ_CHECK(reloaded.ok(), "the saved config does not load: %s\n%s", reloaded.status().ToString().c_str(),
             saved_text.c_str());
  const nlohmann::json again = reloaded->ToJson();
  FUZZ_CHECK(again == saved, "save/load changed the config:\n%s\nvs\n%s", saved_text.c_str(),
             again.dump(2).c_str());
  return 0;
}
