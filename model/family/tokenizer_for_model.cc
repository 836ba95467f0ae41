#include "model/family/tokenizer_for_model.h"

#include "model/albert/albert_text.h"
#include "model/checkpoint/checkpoint_dir.h"
#include "model/util/status_macros.h"

namespace dserve {
namespace {

using RulesLoader = absl::StatusOr<TextRules> (*)(const std::string& dir);

struct FamilyText {
  const char* model_type;
  RulesLoader rules;
};

// One line per family with text rules; the others (DeBERTa) use SentencePiece alone.
constexpr FamilyText kFamilyText[] = {
    {"albert", &AlbertTokenizerRules},
};

// Where a checkpoint's files are: `dir`, or the best/ of a training output
// folder (ResolveCheckpoint); `dir` when it is no whole checkpoint.
std::string FilesDir(const std::string& dir) {
  auto files = ResolveCheckpoint(dir);
  return files.ok() ? files->dir : dir;
}

// `files_dir` holds the checkpoint's files (already resolved).
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadFromFilesDir(const std::string& files_dir,
                                                            const ModelConfig& config) {
  for (const FamilyText& family : kFamilyText) {
    if (config.model_type == family.model_type) {
      ASSIGN_OR_RETURN(TextRules rules, family.rules(files_dir));
      return Tokenizer::FromDirectory(files_dir, rules);
    }
  }
  return Tokenizer::FromDirectory(files_dir);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadCheckpointTokenizer(const std::string& dir,
                                                                   const ModelConfig& config) {
  return LoadFromFilesDir(FilesDir(dir), config);
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadCheckpointTokenizer(const std::string& dir) {
  const std::string files_dir = FilesDir(dir);
  auto config = ModelConfig::FromFile(files_dir + "/config.json");
  if (absl::IsNotFound(config.status())) return Tokenizer::FromDirectory(dir);  // a bare tokenizer folder
  if (!config.ok()) return config.status();
  return LoadFromFilesDir(files_dir, *config);
}

}  // namespace dserve
