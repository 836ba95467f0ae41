// `dserve tokenize --model DIR` (DESIGN.md section 3).
//
// Reads JSONL from `in`: one object per line, {"text": s} or
// {"text": s, "text_pair": t} (blank lines are skipped; other keys are
// ignored). Writes one JSON object per input line to `out`:
//   {"ids": [...], "pieces": [...], "byte_offsets": [[b, e], ...]}
// with DeBERTa's layout [CLS] text [SEP] (text_pair [SEP]), specials
// included; no truncation. byte_offsets are UTF-8 byte offsets [b, e) into
// the ORIGINAL string the token came from: into "text" for [CLS] text [SEP]
// tokens and into "text_pair" for the second segment's tokens (each segment
// is addressed on its own, as Hugging Face's offset mappings do); special
// tokens get [0, 0].
//
// The tokenizer comes from DIR/spm.model, else DIR/tokenizer.json.
// Returns 0 on success; 2 if the tokenizer cannot be loaded; 1 at the first
// bad line (not JSON, "text" missing or not a string, invalid UTF-8), with a
// message on `err` naming the 1-based line number. Lines before it have
// already been written.
#pragma once

#include <istream>
#include <ostream>
#include <string>

namespace dserve {

int RunTokenizeCommand(const std::string& model_dir, std::istream& in, std::ostream& out,
                       std::ostream& err);

}  // namespace dserve
