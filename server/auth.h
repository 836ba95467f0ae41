// Bearer-token check for the Inference service (health and reflection stay
// open). The token is read once at start-up; comparison is constant-time.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dserve {

class TokenAuth {
 public:
  // Reads the first line of `path` (surrounding whitespace trimmed). Empty
  // file, unreadable, not a regular file, or writable by group or other
  // users (they could replace the token) -> error naming the file. Readable
  // by other users -> `*warning` says so (when given): the token is a
  // secret, but mounted secrets are often 0644 and only root-run.
  static absl::StatusOr<TokenAuth> FromFile(const std::string& path, std::string* warning = nullptr);
  explicit TokenAuth(std::string token) : token_(std::move(token)) {}

  // `authorization` metadata value as sent: must be "Bearer <token>"
  // (scheme case-insensitive). The comparison's time depends only on the
  // token's length, never on the bytes sent.
  bool Check(absl::string_view authorization) const;

 private:
  std::string token_;
};

// Constant-time equality of `given` (untrusted, any length) and `secret`:
// the time depends only on secret.size().
bool ConstantTimeEquals(absl::string_view given, absl::string_view secret);

}  // namespace dserve
