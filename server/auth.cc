#include "server/auth.h"

#include <sys/stat.h>

#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace dserve {

bool ConstantTimeEquals(absl::string_view given, absl::string_view secret) {
  // One pass over the secret whatever `given` is: the time reveals neither
  // a matching prefix nor the secret's length (a loop over the longer of
  // the two would give the length away to short guesses). The volatile
  // accumulator keeps the compiler from turning this into an early exit.
  volatile unsigned char diff = given.size() == secret.size() ? 0 : 1;
  for (size_t i = 0; i < secret.size(); ++i) {
    const unsigned char x = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
    diff = static_cast<unsigned char>(diff | (x ^ static_cast<unsigned char>(secret[i])));
  }
  return diff == 0;
}

absl::StatusOr<TokenAuth> TokenAuth::FromFile(const std::string& path, std::string* warning) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return absl::NotFoundError(absl::StrCat("--auth-token-file: cannot read ", path));
  const unsigned mode = static_cast<unsigned>(st.st_mode) & 07777;
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat("--auth-token-file: ", path, " is not a regular file"));
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "--auth-token-file: %s is writable by group or other users (mode %04o): they could replace the token; "
        "chmod 600 it",
        path, mode));
  }
  if ((st.st_mode & S_IROTH) != 0 && warning != nullptr) {
    *warning = absl::StrFormat("--auth-token-file: %s is readable by every user (mode %04o); chmod 600 it", path, mode);
  }
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
