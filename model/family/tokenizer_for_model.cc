#include "model/family/tokenizer_for_model.h"

#include <sys/stat.h>

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

}  // namespace

// The folder the files are in: `dir`, or the best/ of a training output
// folder (ResolveCheckpoint); `dir` when it is no checkpoint (a bare
// tokenizer folder).
std::string FilesDir(const std::string& dir) {
  auto files = ResolveCheckpoint(dir);
  return files.ok() ? files->dir : dir;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadCheckpointTokenizer(const std::string& dir,
                                                                   const ModelConfig& config) {
  const std::string files_dir = FilesDir(dir);
  for (const FamilyText& family : kFamilyText) {
    if (config.model_type == family.model_type) {
      ASSIGN_OR_RETURN(TextRules rules, family.rules(files_dir));
      return Tokenizer::FromDirectory(files_dir, rules);
    }
  }
  return Tokenizer::FromDirectory(files_dir);
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadCheckpointTokenizer(const std::string& dir) {
  const std::string path = FilesDir(dir) + "/config.json";
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return Tokenizer::FromDirectory(dir);
  ASSIGN_OR_RETURN(ModelConfig config, ModelConfig::FromFile(path));
  return LoadCheckpointTokenizer(dir, config);
}

}  // namespace dserve
