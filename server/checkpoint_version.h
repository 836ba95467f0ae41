// Checkpoint identity for serving: the content version ListModels reports
// and the fingerprint the hot-reload watcher compares between polls.
// Torch-free; reads files only.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace dserve {

// FNV-1a over config.json, each weights file's header, size and sampled
// blocks, and the tokenizer files: cheap on multi-GB files, changes
// whenever the checkpoint does (16 hex digits).
absl::StatusOr<std::string> CheckpointVersion(const std::string& dir);

// What the watcher compares between polls: the version plus each file's
// inode, size and modification time (so a rewrite that the sampled hash
// could miss still shows). An unreadable directory gives "!" + the error.
std::string CheckpointFingerprint(const std::string& dir);

}  // namespace dserve
