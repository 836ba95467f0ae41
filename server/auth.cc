#include "server/auth.h"

#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace dserve {

bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  // Walk the longer input fully so the time does not reveal a matching prefix.
  const size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

absl::StatusOr<TokenAuth> TokenAuth::FromFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("--auth-token-file: cannot read ", path));
  std::string line;
  std::getline(in, line);
  std::string token(absl::StripAsciiWhitespace(line));
  if (token.empty()) return absl::InvalidArgumentError(absl::StrCat("--auth-token-file: ", path, " holds no token"));
  return TokenAuth(std::move(token));
}

bool TokenAuth::Check(absl::string_view authorization) const {
  constexpr absl::string_view kScheme = "bearer ";
  if (authorization.size() < kScheme.size() ||
      !absl::EqualsIgnoreCase(authorization.substr(0, kScheme.size()), kScheme)) {
    return false;
  }
  return ConstantTimeEquals(absl::StripAsciiWhitespace(authorization.substr(kScheme.size())), token_);
}

}  // namespace dserve
