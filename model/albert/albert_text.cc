#include "model/albert/albert_text.h"

namespace dserve {

absl::StatusOr<TextRules> AlbertTokenizerRules(const std::string& dir) { return ReadAlbertTextRules(dir); }

}  // namespace dserve
