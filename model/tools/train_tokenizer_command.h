// `dserve train-tokenizer --input FILE... --vocab-size N --out DIR`
//
// Trains a SentencePiece Unigram model in DeBERTa-v3's layout by running
// Debian's `spm_train` (package `sentencepiece`) as a subprocess: the
// library cannot be linked (see the tokenizer issue), the program can. The
// child gets an argument vector (posix_spawn, no shell) and stdin from
// /dev/null; its output (chatty) goes to `err` only with `verbose`, otherwise
// its last lines are shown if it fails.
//
// Result: DIR/spm.model (and DIR/spm.vocab, the human-readable piece list)
// with
//   [PAD]=0 (pad), [CLS]=1 (bos), [SEP]=2 (eos), [UNK]=3 (unk),
//   [MASK]=4 as a CONTROL symbol,
// then the learned pieces; `vocab_size` counts all of them, so a model built
// on it has exactly `vocab_size` embedding rows. [MASK] is a control symbol
// rather than a user-defined one so that no text ever encodes to it (the
// literal string "[MASK]" in a document is split like any other text), while
// Tokenizer::mask_id() and Hugging Face's DebertaV2Tokenizer still find it by
// name. (Released DeBERTa-v3 checkpoints instead append [MASK] after the
// SentencePiece vocabulary through added_tokens.json; our Tokenizer handles
// both.) Normalisation nmt_nfkc, split_by_whitespace true, byte fallback off
// unless asked for.
//
// The model is written to DIR/.spm_train.tmp/ first, checked by loading it
// with dserve's own Tokenizer (ids above, mask_id != unk_id), fsynced and
// renamed into place; an existing DIR/spm.model is replaced only on success.
// With the same inputs, options and thread count, spm.model is
// byte-identical from run to run (spm_train's output depends on the thread
// count, hence the default of 1).
//
// Returns 0 on success, with one summary line on `out`; 2 for invalid
// options or unreadable inputs (the message names the file); 1 when
// spm_train is missing, fails, or writes a model that does not check out.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace dserve {

struct TrainTokenizerOptions {
  std::vector<std::string> inputs;  // UTF-8 text files, one sentence/paragraph per line
  int vocab_size = 8000;            // all pieces, specials and [MASK] included
  std::string out_dir;
  std::string model_type = "unigram";  // the only type dserve's tokenizer reads
  double character_coverage = 0.9995;
  bool byte_fallback = false;
  // spm_train --input_sentence_size: 0 = every line; else a random sample.
  int64_t max_sentences = 0;
  int threads = 1;    // spm_train --num_threads (the result depends on it)
  uint32_t seed = 1;  // spm_train --random_seed
  bool verbose = false;
  // Program to run; empty: $DSERVE_SPM_TRAIN, else `spm_train` on $PATH.
  std::string spm_train;
};

int RunTrainTokenizerCommand(const TrainTokenizerOptions& options, std::ostream& out,
                             std::ostream& err);

// The spm_train argument vector (argv[0] = `program`) for `options` with
// the model written to `model_prefix`.model / .vocab. Exposed for tests.
std::vector<std::string> SpmTrainArgs(const TrainTokenizerOptions& options,
                                      const std::string& program,
                                      const std::string& model_prefix);

}  // namespace dserve
