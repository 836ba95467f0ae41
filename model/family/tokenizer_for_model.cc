#include "model/family/tokenizer_for_model.h"

#include "model/albert/albert_config.h"
#include "model/albert/albert_text.h"
#include "model/checkpoint/checkpoint_dir.h"
#include "model/deberta_v1/deberta_v1_config.h"
#include "model/deberta_v1/deberta_v1_text.h"
#include "model/util/status_macros.h"

namespace dserve {
namespace {

using TokenizerLoader = absl::StatusOr<std::unique_ptr<Tokenizer>> (*)(const std::string& dir);

// ALBERT: SentencePiece with its family's text rules.
absl::StatusOr<std::unique_ptr<Tokenizer>> AlbertTokenizer(const std::string& dir) {
  ASSIGN_OR_RETURN(TextRules rules, AlbertTokenizerRules(dir));
  return Tokenizer::FromDirectory(dir, rules);
}

struct FamilyText {
  const char* model_type;
  TokenizerLoader load;
};

// One line per family with a tokenizer of its own; the others (DeBERTa-v2/v3)
// use SentencePiece alone (Tokenizer::FromDirectory).
constexpr FamilyText kFamilyText[] = {
    {kAlbertModelType, &AlbertTokenizer},
    {kDebertaV1ModelType, &DebertaV1Tokenizer},  // GPT-2 byte-level BPE
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
    if (config.model_type == family.model_type) return family.load(files_dir);
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
