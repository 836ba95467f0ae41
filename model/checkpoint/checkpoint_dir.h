// Checkpoint directories (DESIGN §3): find the files of a Hugging Face / dserve
// checkpoint, and write one atomically.
//
// Layout read:
//   config.json                       required
//   model.safetensors                 or
//   model.safetensors.index.json      {"weight_map": {tensor name: shard file}}, or
//   pytorch_model.bin                 (torch.save state_dict: pytorch_bin.h), or
//   pytorch_model.bin.index.json      (its shards, the same index layout);
//                                     the first that exists is used
//   spm.model                         else spiece.model (ALBERT), else
//                                     tokenizer.json; none is allowed
//   added_tokens.json                 optional (DeBERTa-v3's [MASK])
//   tokenizer_config.json             optional (ALBERT's text-rule flags)
//   vocab.json, merges.txt,           DeBERTa v1's byte-level BPE (read by its
//   special_tokens_map.json           family; listed in bpe_files)
//
// Layout written: config.json, model.safetensors (metadata {"format": "pt"},
// which transformers requires), spm.model or tokenizer.json when a tokenizer
// is given, the BPE tokenizer files given, and any extra JSON files. Torch-free.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/checkpoint/model_config.h"
#include "model/checkpoint/safetensors.h"

namespace dserve {

enum class TokenizerKind { kNone, kSentencePiece, kTokenizerJson };

// The files of one checkpoint directory; all paths are `dir` + "/" + name.
struct CheckpointFiles {
  std::string dir;
  std::string config;                // dir/config.json
  // model.safetensors or pytorch_model.bin, or the shards in sorted order
  // (a ".bin" path is a torch.save file, any other a safetensors file).
  std::vector<std::string> weights;
  std::string weight_index;  // the *.index.json when sharded, else ""
  // Sharded only: tensor name -> shard path (as listed in `weights`).
  std::map<std::string, std::string> weight_map;
  TokenizerKind tokenizer_kind = TokenizerKind::kNone;
  std::string tokenizer;     // spm.model, spiece.model or tokenizer.json; "" when absent
  std::string added_tokens;  // added_tokens.json when present, else ""
  std::string tokenizer_config;  // tokenizer_config.json when present, else ""
  // The files of a GPT-2 byte-level BPE tokenizer (DeBERTa v1) when present:
  // vocab.json, merges.txt, special_tokens_map.json, in that order. They
  // change tokenization, so the serving version hashes them.
  std::vector<std::string> bpe_files;
};

// Finds the files of the checkpoint in `dir`; `dir` may also be a `dserve
// train --out` folder (no config.json of its own, a best/ that has one):
// then its best/ is resolved (files.dir says so) and the log says it once.
// Errors name the directory and
// the missing file: NotFound when `dir` or config.json is missing, or when
// none of the four weight files exists; InvalidArgument for a
// malformed index (not JSON, no "weight_map" object, a shard name that is not
// a plain file name) and NotFound for a listed shard that is missing. Only
// checks existence: the files are parsed by their own readers.
absl::StatusOr<CheckpointFiles> ResolveCheckpoint(const std::string& dir);

// Writes a complete checkpoint directory at `dir`, atomically at the
// directory level:
//   1. everything is written into a sibling temp dir `dir.tmp.XXXXXX`
//      (config.json from config.ToJson(), model.safetensors from `tensors`,
//      the tokenizer copied from `tokenizer_src` under its own name when it
//      is spm.model, spiece.model (ALBERT's, what AlbertTokenizer reads) or
//      tokenizer.json, else as spm.model, with
//      the tokenizer_config.json beside the source when there is one (its
//      text-rule flags), and one
//      file per entry of `extra_files`, an object name -> JSON, e.g.
//      {"trainer_state.json": {...}}), each file fsynced, then the temp dir;
//   2. when `dir` does not exist: rename(temp, dir), fsync the parent;
//   3. when `dir` exists: it is swapped with the temp dir by
//      renameat2(RENAME_EXCHANGE) when the filesystem supports it (no window
//      without `dir`), else renamed aside to `dir.old.XXXXXX` and the temp dir
//      renamed in; the parent is fsynced and the old copy removed.
// Crash windows: before the final rename, `dir` is untouched and a
// `dir.tmp.XXXXXX` may be left behind (incomplete; safe to delete). In the
// fallback of step 3, a crash between the two renames leaves no `dir`, the old
// checkpoint complete in `dir.old.XXXXXX` and the new one complete in
// `dir.tmp.XXXXXX` (rename either back by hand). After the swap, a crash can
// leave a complete old copy in `dir.old.XXXXXX` or `dir.tmp.XXXXXX` (safe to
// delete). A failure before the swap removes the temp dir and leaves `dir`
// as it was; `extra_files` names must be plain file names other than the
// ones above. `tokenizer_files` (paths) are copied as they are under their
// own file names (DeBERTa v1's vocab.json, merges.txt,
// special_tokens_map.json, tokenizer_config.json: CheckpointFiles::bpe_files);
// a name of the checkpoint's own (config.json, model.safetensors) is refused.
// Not safe to call concurrently for the same `dir`.
absl::Status WriteCheckpointDir(const std::string& dir, const ModelConfig& config,
                                const std::vector<TensorToWrite>& tensors,
                                const std::string& tokenizer_src,
                                const nlohmann::json& extra_files = {},
                                const std::vector<std::string>& tokenizer_files = {});

namespace internal {
// Tests only: disables the RENAME_EXCHANGE path so the fallback runs.
void SetUseRenameExchangeForTesting(bool enabled);
}  // namespace internal

}  // namespace dserve
