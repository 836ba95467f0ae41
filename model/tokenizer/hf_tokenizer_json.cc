#include "model/tokenizer/hf_tokenizer_json.h"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace dserve {

namespace {

using nlohmann::json;

constexpr std::string_view kSpaceSymbol = "\xe2\x96\x81";

absl::Status Unsupported(absl::string_view what) {
  return absl::UnimplementedError(absl::StrCat("tokenizer.json: unsupported ", what));
}

struct NormalizerFlags {
  bool strip = false;
  bool collapse_spaces = false;
};

absl::Status ApplyNormalizer(const json& n, SpmModelSpec* spec, NormalizerFlags* flags) {
  if (n.is_null()) return absl::OkStatus();
  const std::string type = n.value("type", "");
  if (type == "Sequence") {
    for (const json& child : n.at("normalizers")) {
      absl::Status s = ApplyNormalizer(child, spec, flags);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }
  if (type == "Precompiled") {
    const json& cm = n.at("precompiled_charsmap");
    if (cm.is_null()) return absl::OkStatus();
    std::string blob;
    if (!absl::Base64Unescape(cm.get<std::string>(), &blob)) {
      return absl::InvalidArgumentError("tokenizer.json: precompiled_charsmap is not base64");
    }
    spec->normalizer.precompiled_charsmap = std::move(blob);
    return absl::OkStatus();
  }
  if (type == "Strip") {
    if (!n.value("strip_left", true) || !n.value("strip_right", true)) {
      return Unsupported("one-sided Strip normalizer");
    }
    flags->strip = true;
    return absl::OkStatus();
  }
  if (type == "Replace") {
    const json& pattern = n.at("pattern");
    const std::string content = n.value("content", "");
    if (pattern.contains("Regex") && pattern.at("Regex") == " {2,}" && content == " ") {
      flags->collapse_spaces = true;
      return absl::OkStatus();
    }
    return Unsupported(absl::StrCat("Replace normalizer ", pattern.dump()));
  }
  return Unsupported(absl::StrCat("normalizer ", type));
}

absl::Status ApplyPreTokenizer(const json& p, SpmModelSpec* spec, bool* seen_metaspace) {
  if (p.is_null()) return absl::OkStatus();
  const std::string type = p.value("type", "");
  if (type == "Sequence") {
    for (const json& child : p.at("pretokenizers")) {
      absl::Status s = ApplyPreTokenizer(child, spec, seen_metaspace);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }
  if (type == "Metaspace") {
    if (p.value("replacement", std::string(kSpaceSymbol)) != kSpaceSymbol) {
      return Unsupported("Metaspace replacement other than U+2581");
    }
    bool prefix = p.value("add_prefix_space", true);
    if (p.contains("prepend_scheme")) prefix = p.at("prepend_scheme") != "never";
    spec->normalizer.add_dummy_prefix = prefix;
    *seen_metaspace = true;
    return absl::OkStatus();
  }
  return Unsupported(absl::StrCat("pre_tokenizer ", type));
}

}  // namespace

absl::StatusOr<SpmModelSpec> ParseHfTokenizerJson(std::string_view json_text) {
  json doc = json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    return absl::InvalidArgumentError("tokenizer.json: not valid JSON");
  }
  try {
    const json& model = doc.at("model");
    const std::string type = model.value("type", "");
    if (type != "Unigram") return Unsupported(absl::StrCat("model type '", type, "' (only Unigram)"));
    SpmModelSpec spec;
    spec.byte_fallback = model.value("byte_fallback", false);
    const json& vocab = model.at("vocab");
    spec.pieces.reserve(vocab.size());
    for (const json& entry : vocab) {
      spec.pieces.push_back(entry.at(0).get<std::string>());
      spec.scores.push_back(entry.at(1).get<float>());
      PieceType t = PieceType::kNormal;
      const std::string& piece = spec.pieces.back();
      if (spec.byte_fallback && piece.size() == 6 && piece.rfind("<0x", 0) == 0 && piece[5] == '>') {
        t = PieceType::kByte;
      }
      spec.types.push_back(t);
    }
    if (!model.contains("unk_id") || model.at("unk_id").is_null()) {
      return absl::InvalidArgumentError("tokenizer.json: Unigram model has no unk_id");
    }
    const int unk_id = model.at("unk_id").get<int>();
    if (unk_id < 0 || unk_id >= static_cast<int>(spec.pieces.size())) {
      return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: unk_id ", unk_id, " out of range"));
    }
    spec.types[unk_id] = PieceType::kUnknown;
    spec.unk_piece = spec.pieces[unk_id];

    if (doc.contains("added_tokens")) {
      for (const json& tok : doc.at("added_tokens")) {
        const int id = tok.at("id").get<int>();
        const std::string content = tok.at("content").get<std::string>();
        const bool special = tok.value("special", false);
        const PieceType t = special ? PieceType::kControl : PieceType::kUserDefined;
        if (id < static_cast<int>(spec.pieces.size())) {
          if (spec.pieces[id] != content) {
            return absl::InvalidArgumentError(absl::StrCat(
                "tokenizer.json: added token '", content, "' has id ", id, " of piece '",
                spec.pieces[id], "'"));
          }
          if (id != unk_id) spec.types[id] = t;
        } else if (id == static_cast<int>(spec.pieces.size())) {
          spec.pieces.push_back(content);
          spec.scores.push_back(0.0f);
          spec.types.push_back(t);
        } else {
          return absl::InvalidArgumentError(absl::StrCat(
              "tokenizer.json: added token '", content, "' id ", id, " leaves a gap after the vocab"));
        }
      }
    }

    NormalizerFlags flags;
    if (doc.contains("normalizer")) {
      absl::Status s = ApplyNormalizer(doc.at("normalizer"), &spec, &flags);
      if (!s.ok()) return s;
    }
    spec.normalizer.remove_extra_whitespaces = flags.strip && flags.collapse_spaces;
    bool metaspace = false;
    if (doc.contains("pre_tokenizer")) {
      absl::Status s = ApplyPreTokenizer(doc.at("pre_tokenizer"), &spec, &metaspace);
      if (!s.ok()) return s;
    }
    if (!metaspace) return Unsupported("tokenizer without a Metaspace pre_tokenizer");
    spec.normalizer.escape_whitespaces = true;
    return spec;
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: ", e.what()));
  }
}

absl::StatusOr<SpmModelSpec> ReadHfTokenizerJson(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::stringstream buf;
  buf << in.rdbuf();
  auto spec = ParseHfTokenizerJson(buf.str());
  if (!spec.ok()) {
    return absl::Status(spec.status().code(), absl::StrCat(path, ": ", spec.status().message()));
  }
  return spec;
}

}  // namespace dserve
