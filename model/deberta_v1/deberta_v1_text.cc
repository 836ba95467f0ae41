#include "model/deberta_v1/deberta_v1_text.h"

#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "model/deberta_v1/deberta_v1_config.h"

namespace dserve {
namespace {

bool IsFile(const std::filesystem::path& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> DebertaV1Tokenizer(const std::string& dir) {
  namespace fs = std::filesystem;
  const bool vocab = IsFile(fs::path(dir) / "vocab.json");
  const bool merges = IsFile(fs::path(dir) / "merges.txt");
  if (vocab && merges) return Tokenizer::FromBpeDirectory(dir);
  const fs::path json_path = fs::path(dir) / "tokenizer.json";
  if (IsFile(json_path)) {
    auto tokenizer = Tokenizer::FromTokenizerJsonFile(json_path.string());
    if (!tokenizer.ok()) return tokenizer.status();
    if (!(*tokenizer)->is_bpe()) {
      return absl::InvalidArgumentError(absl::StrCat(
          json_path.string(), ": holds a Unigram (SentencePiece) model, but DeBERTa v1 (model_type \"",
          kDebertaV1ModelType, "\") uses GPT-2 byte-level BPE: give vocab.json + merges.txt or a tokenizer.json "
          "with a BPE model"));
    }
    return tokenizer;
  }
  const std::string expected = absl::StrCat("DeBERTa v1 (model_type \"", kDebertaV1ModelType,
                                            "\") needs GPT-2 byte-level BPE files: vocab.json + merges.txt "
                                            "(as DebertaTokenizer saves them) or a tokenizer.json with a BPE model");
  if (vocab || merges) {
    return absl::NotFoundError(absl::StrCat((fs::path(dir) / (vocab ? "merges.txt" : "vocab.json")).string(),
                                            " is missing (", dir, " has ", vocab ? "vocab.json" : "merges.txt",
                                            " without it); ", expected));
  }
  const bool spm = IsFile(fs::path(dir) / "spm.model") || IsFile(fs::path(dir) / "spiece.model");
  return absl::NotFoundError(absl::StrCat("no tokenizer in ", dir, ": ", expected,
                                          spm ? " (its SentencePiece model is not a v1 tokenizer)" : ""));
}

}  // namespace dserve
