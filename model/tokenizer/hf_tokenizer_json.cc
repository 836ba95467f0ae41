#include "model/tokenizer/hf_tokenizer_json.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "model/util/status_macros.h"

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

absl::StatusOr<SpmModelSpec> ParseUnigram(const json& doc) {
  try {
    const json& model = doc.at("model");
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

// null, "", false or absent.
bool Unset(const json& model, const char* key) {
  if (!model.contains(key)) return true;
  const json& v = model.at(key);
  return v.is_null() || (v.is_string() && v.get<std::string>().empty()) ||
         (v.is_boolean() && !v.get<bool>());
}

absl::Status ApplyByteLevel(const json& p, BpeModelSpec* spec, bool* seen) {
  if (p.is_null()) return absl::OkStatus();
  const std::string type = p.value("type", "");
  if (type == "Sequence") {
    const json& children = p.at("pretokenizers");
    if (children.size() != 1) return Unsupported("pre_tokenizer Sequence other than one ByteLevel");
    return ApplyByteLevel(children.at(0), spec, seen);
  }
  if (type != "ByteLevel") return Unsupported(absl::StrCat("pre_tokenizer ", type, " with a BPE model"));
  spec->add_prefix_space = p.value("add_prefix_space", false);
  spec->use_regex = p.value("use_regex", true);
  *seen = true;
  return absl::OkStatus();
}

absl::StatusOr<BpeModelSpec> ParseBpe(const json& doc, const std::string& source) {
  try {
    const json& model = doc.at("model");
    BpeModelSpec spec;
    spec.vocab_source = absl::StrCat(source, " (model.vocab)");
    spec.merges_source = absl::StrCat(source, " (model.merges)");
    spec.prefix_rule = PrefixSpaceRule::kFast;
    if (model.contains("dropout") && !model.at("dropout").is_null() && model.at("dropout").get<double>() != 0) {
      return Unsupported("BPE dropout");
    }
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix", "byte_fallback"}) {
      if (!Unset(model, key)) return Unsupported(absl::StrCat("BPE ", key, " ", model.at(key).dump()));
    }
    spec.fuse_unk = model.value("fuse_unk", false);
    spec.ignore_merges = model.value("ignore_merges", false);
    const json& vocab = model.at("vocab");
    if (!vocab.is_object()) return absl::InvalidArgumentError("tokenizer.json: model.vocab is not an object");
    spec.vocab.reserve(vocab.size());
    for (auto it = vocab.begin(); it != vocab.end(); ++it) {
      spec.vocab.emplace_back(it.key(), it.value().get<int>());
    }
    const json& merges = model.at("merges");
    spec.merges.reserve(merges.size());
    for (size_t r = 0; r < merges.size(); ++r) {
      const json& m = merges.at(r);
      if (m.is_array() && m.size() == 2) {
        spec.merges.emplace_back(m.at(0).get<std::string>(), m.at(1).get<std::string>());
        continue;
      }
      const std::string line = m.is_string() ? m.get<std::string>() : std::string();
      const size_t sp = line.find(' ');
      if (sp == std::string::npos || sp == 0 || sp + 1 == line.size() ||
          line.find(' ', sp + 1) != std::string::npos) {
        return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: model.merges[", r,
                                                       "] is not a pair of tokens: ", m.dump()));
      }
      spec.merges.emplace_back(line.substr(0, sp), line.substr(sp + 1));
    }
    std::vector<std::string> names;
    for (const auto& [piece, id] : spec.vocab) names.push_back(piece);
    if (doc.contains("added_tokens") && doc.at("added_tokens").is_array()) {
      std::vector<std::string> sorted = names;
      std::sort(sorted.begin(), sorted.end());
      for (const json& tok : doc.at("added_tokens")) {
        const std::string content = tok.at("content").get<std::string>();
        names.push_back(content);
        if (!std::binary_search(sorted.begin(), sorted.end(), content)) {
          spec.added_tokens.emplace_back(content, tok.at("id").get<int>());
        }
      }
    }
    std::sort(names.begin(), names.end());
    auto first_found = [&](std::initializer_list<std::string> options) -> std::string {
      for (const std::string& o : options) {
        if (!o.empty() && std::binary_search(names.begin(), names.end(), o)) return o;
      }
      return "";
    };
    const std::string unk =
        model.contains("unk_token") && model.at("unk_token").is_string() ? model.at("unk_token").get<std::string>() : "";
    spec.cls_token = first_found({"[CLS]", "<s>"});
    spec.sep_token = first_found({"[SEP]", "</s>"});
    spec.pad_token = first_found({"[PAD]", "<pad>"});
    spec.unk_token = first_found({unk, "[UNK]", "<unk>"});
    spec.mask_token = first_found({"[MASK]", "<mask>"});
    if (doc.contains("normalizer") && !doc.at("normalizer").is_null()) {
      return Unsupported(absl::StrCat("normalizer ", doc.at("normalizer").value("type", "?"),
                                      " with a BPE model"));
    }
    bool byte_level = false;
    if (doc.contains("pre_tokenizer")) RETURN_IF_ERROR(ApplyByteLevel(doc.at("pre_tokenizer"), &spec, &byte_level));
    if (!byte_level) return Unsupported("BPE model without a ByteLevel pre_tokenizer");
    return spec;
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: ", e.what()));
  }
}

absl::StatusOr<json> ParseDoc(std::string_view json_text) {
  json doc = json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    return absl::InvalidArgumentError("tokenizer.json: not valid JSON");
  }
  if (!doc.contains("model") || !doc.at("model").is_object()) {
    return absl::InvalidArgumentError("tokenizer.json: no \"model\" object");
  }
  return doc;
}

std::string ModelType(const json& doc) {
  const json& t = doc.at("model").contains("type") ? doc.at("model").at("type") : json();
  return t.is_string() ? t.get<std::string>() : "";
}

}  // namespace

absl::StatusOr<SpmModelSpec> ParseHfTokenizerJson(std::string_view json_text) {
  ASSIGN_OR_RETURN(json doc, ParseDoc(json_text));
  const std::string type = ModelType(doc);
  if (type != "Unigram") return Unsupported(absl::StrCat("model type '", type, "' (only Unigram)"));
  return ParseUnigram(doc);
}

absl::StatusOr<HfTokenizerModel> ParseHfTokenizerJsonModel(std::string_view json_text,
                                                           const std::string& source) {
  ASSIGN_OR_RETURN(json doc, ParseDoc(json_text));
  const std::string type = ModelType(doc);
  if (type == "Unigram") {
    ASSIGN_OR_RETURN(SpmModelSpec spec, ParseUnigram(doc));
    return HfTokenizerModel(std::move(spec));
  }
  if (type == "BPE") {
    ASSIGN_OR_RETURN(BpeModelSpec spec, ParseBpe(doc, source));
    return HfTokenizerModel(std::move(spec));
  }
  return Unsupported(absl::StrCat("model type '", type, "' (Unigram or BPE)"));
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

absl::StatusOr<HfTokenizerModel> ReadHfTokenizerJsonModel(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::stringstream buf;
  buf << in.rdbuf();
  auto model = ParseHfTokenizerJsonModel(buf.str(), path);
  if (!model.ok()) {
    return absl::Status(model.status().code(), absl::StrCat(path, ": ", model.status().message()));
  }
  return model;
}

}  // namespace dserve
