#include "server/request_validation.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "model/tokenizer/utf8.h"
#include "server/proto/raw_requests.pb.h"

namespace dserve {
namespace {

std::vector<int64_t> Widen(const std::vector<int32_t>& v) { return std::vector<int64_t>(v.begin(), v.end()); }

absl::Status CheckText(absl::string_view field, const std::string& text, int64_t max_bytes) {
  if (text.empty()) return absl::InvalidArgumentError(absl::StrCat(field, ": empty text"));
  if (static_cast<int64_t>(text.size()) > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", text.size(), " bytes exceed the limit of ", max_bytes,
                                                   " (--max-text-bytes)"));
  }
  return absl::OkStatus();
}

// CheckText for `name`[`index`]; the field name is only built for an error.
absl::Status CheckText(absl::string_view name, int index, const std::string& text, int64_t max_bytes) {
  if (!text.empty() && static_cast<int64_t>(text.size()) <= max_bytes) return absl::OkStatus();
  return CheckText(absl::StrCat(name, "[", index, "]"), text, max_bytes);
}

absl::Status CheckCount(absl::string_view field, int64_t count, int64_t limit, absl::string_view flag) {
  if (count == 0) return absl::InvalidArgumentError(absl::StrCat(field, ": at least one is required"));
  if (count > limit) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": ", count, " items exceed the limit of ", limit, " (", flag, ")"));
  }
  return absl::OkStatus();
}

// Prefixes a tokenizer error with the field it came from.
absl::Status InField(absl::string_view field, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat(field, ": ", s.message()));
}

// Refuses a text whose windows would take the request's total past
// --max-windows-per-request, before any of its windows is built. `before`:
// the windows of the earlier texts of the request.
absl::Status CheckWindows(absl::string_view field, const WindowPlan& plan, int64_t before, int64_t limit,
                          absl::string_view unit, absl::string_view first_name, absl::string_view earlier) {
  if (plan.count() <= limit - before) return absl::OkStatus();
  std::string message = absl::StrCat(field, ": needs ", plan.count_is_lower_bound() ? "more than " : "",
                                     plan.count_is_lower_bound() ? plan.count() - 1 : plan.count(), " ", unit,
                                     " of ", plan.max_length(),
                                     " tokens (", first_name, " leaves ", plan.room(), ")");
  if (before > 0 && !plan.count_is_lower_bound()) {
    absl::StrAppend(&message, ", ", before + plan.count(), " with the ", earlier, " before it");
  }
  absl::StrAppend(&message, "; the limit is ", limit, " per request (--max-windows-per-request)");
  return absl::InvalidArgumentError(message);
}

// Byte range of the second text covered by a window's tokens.
ByteSpan SecondTextRange(const Window& w) {
  ByteSpan range{0, 0};
  bool first = true;
  for (const auto& off : w.second_offsets) {
    if (!off) continue;
    if (first) range.begin = off->begin;
    range.end = off->end;
    first = false;
  }
  return range;
}

absl::Status CheckDirection(v1::TruncationDirection direction) {
  if (direction == v1::TRUNCATION_DIRECTION_RIGHT || direction == v1::TRUNCATION_DIRECTION_LEFT) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("truncation_direction: unknown value ", static_cast<int>(direction), " (RIGHT or LEFT)"));
}

// Left truncation (TRUNCATION_DIRECTION_LEFT) from the tokenizer's right
// truncation `right` of the same text(s): the tokenizer decides how many
// tokens of each text stay (Hugging Face's count does not depend on the
// direction), and the last that many of each text's whole encoding are
// kept, with every special token. `*dropped`: some token was removed.
absl::StatusOr<Encoding> TruncateLeft(const Tokenizer& tokenizer, const std::string& first, const std::string* second,
                                      const Encoding& right, bool* dropped) {
  EncodeOptions whole;
  whole.max_length = 0;  // no limit
  auto full = second != nullptr ? tokenizer.EncodePair(first, *second, whole) : tokenizer.Encode(first, whole);
  if (!full.ok()) return full.status();
  *dropped = full->size() > right.size();
  if (!*dropped) return right;
  int64_t keep[2] = {0, 0}, have[2] = {0, 0}, seen[2] = {0, 0};
  for (int8_t s : right.sequence_ids) {
    if (s >= 0) ++keep[s];
  }
  for (int8_t s : full->sequence_ids) {
    if (s >= 0) ++have[s];
  }
  Encoding out;
  for (size_t t = 0; t < full->size(); ++t) {
    const int8_t s = full->sequence_ids[t];
    if (s >= 0 && seen[s]++ < have[s] - keep[s]) continue;
    out.ids.push_back(full->ids[t]);
    out.type_ids.push_back(full->type_ids[t]);
    out.sequence_ids.push_back(s);
    out.offsets.push_back(full->offsets[t]);
  }
  return out;
}

// Whether right truncation cut text `s` of `enc` (0: `first`, 1: `second`):
// its last kept token does not end the text (trailing whitespace aside).
bool CutAtEnd(const Encoding& enc, int8_t s, const std::string& text) {
  size_t last_end = 0;
  for (size_t t = 0; t < enc.size(); ++t) {
    if (enc.sequence_ids[t] == s) last_end = std::max<size_t>(last_end, enc.offsets[t].end);
  }
  return text.find_first_not_of(" \t\r\n", last_end) != std::string::npos;
}

ItemInput WindowInput(const Window& w, bool type_ids) {
  return {Widen(w.ids), type_ids ? Widen(w.type_ids) : std::vector<int64_t>()};
}

// The bytes mirror of each request (server/proto/raw_requests.proto).
template <typename Request>
struct MirrorOf;
template <>
struct MirrorOf<v1::ClassifyRequest> {
  using type = internal::ClassifyRequestBytes;
};
template <>
struct MirrorOf<v1::AnswerRequest> {
  using type = internal::AnswerRequestBytes;
};
template <>
struct MirrorOf<v1::RerankRequest> {
  using type = internal::RerankRequestBytes;
};

}  // namespace

absl::Status FindInvalidUtf8(const google::protobuf::Message& raw) {
  const auto* descriptor = raw.GetDescriptor();
  const auto* reflection = raw.GetReflection();
  for (int f = 0; f < descriptor->field_count(); ++f) {
    const auto* field = descriptor->field(f);
    std::string scratch;
    if (field->is_repeated()) {
      for (int i = 0; i < reflection->FieldSize(raw, field); ++i) {
        const std::string& value = reflection->GetRepeatedStringReference(raw, field, i, &scratch);
        absl::Status s = ValidateUtf8(value, absl::StrCat(field->name(), "[", i, "]"));
        if (!s.ok()) return s;
      }
    } else {
      const std::string& value = reflection->GetStringReference(raw, field, &scratch);
      absl::Status s = ValidateUtf8(value, field->name());
      if (!s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

template <typename Request>
absl::StatusOr<std::unique_ptr<Request>> ParseRequest(absl::string_view bytes) {
  // ParseFromArray takes an int size; gRPC's message limit keeps real
  // requests far below it.
  if (bytes.size() > static_cast<size_t>(std::numeric_limits<int>::max())) {
    return absl::InvalidArgumentError(absl::StrCat("request: ", bytes.size(), " bytes is too large"));
  }
  const int size = static_cast<int>(bytes.size());
  auto request = std::make_unique<Request>();
  if (request->ParseFromArray(bytes.data(), size)) return request;
  // Parsed again as its bytes mirror to name the field holding invalid UTF-8.
  typename MirrorOf<Request>::type mirror;
  if (mirror.ParseFromArray(bytes.data(), size)) {
    absl::Status s = FindInvalidUtf8(mirror);
    if (!s.ok()) return s;
  }
  return absl::InvalidArgumentError(absl::StrCat("request: not a valid ", Request::descriptor()->full_name()));
}

template absl::StatusOr<std::unique_ptr<v1::ClassifyRequest>> ParseRequest(absl::string_view);
template absl::StatusOr<std::unique_ptr<v1::AnswerRequest>> ParseRequest(absl::string_view);
template absl::StatusOr<std::unique_ptr<v1::RerankRequest>> ParseRequest(absl::string_view);

absl::StatusOr<Truncation> ToTruncation(v1::Truncation t, Truncation default_value) {
  switch (t) {
    case v1::TRUNCATION_UNSPECIFIED: return default_value;
    case v1::TRUNCATION_NONE: return Truncation::kNone;
    case v1::TRUNCATION_LONGEST_FIRST: return Truncation::kLongestFirst;
    case v1::TRUNCATION_ONLY_FIRST: return Truncation::kOnlyFirst;
    case v1::TRUNCATION_ONLY_SECOND: return Truncation::kOnlySecond;
    default:
      return absl::InvalidArgumentError(absl::StrCat("truncation: unknown value ", static_cast<int>(t)));
  }
}

absl::Status CheckClassifyLimits(const v1::ClassifyRequest& request, const ServeOptions& limits) {
  if (auto s = CheckCount("texts", request.texts_size(), limits.max_texts_per_request, "--max-texts-per-request");
      !s.ok()) {
    return s;
  }
  if (auto t = ToTruncation(request.truncation(), Truncation::kLongestFirst); !t.ok()) return t.status();
  if (auto s = CheckDirection(request.truncation_direction()); !s.ok()) return s;
  if (request.text_pairs_size() != 0 && request.text_pairs_size() != request.texts_size()) {
    return absl::InvalidArgumentError(absl::StrCat("text_pairs: ", request.text_pairs_size(), " for ",
                                                   request.texts_size(), " texts (give none, or one per text)"));
  }
  for (int i = 0; i < request.texts_size(); ++i) {
    if (auto s = CheckText("texts", i, request.texts(i), limits.max_text_bytes); !s.ok()) return s;
  }
  for (int i = 0; i < request.text_pairs_size(); ++i) {
    if (auto s = CheckText("text_pairs", i, request.text_pairs(i), limits.max_text_bytes); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status CheckAnswerLimits(const v1::AnswerRequest& request, const ServeOptions& limits) {
  if (auto s = CheckText("question", request.question(), limits.max_text_bytes); !s.ok()) return s;
  if (auto s = CheckCount("contexts", request.contexts_size(), limits.max_contexts_per_request,
                          "--max-contexts-per-request");
      !s.ok()) {
    return s;
  }
  for (int c = 0; c < request.contexts_size(); ++c) {
    if (auto s = CheckText("contexts", c, request.contexts(c), limits.max_text_bytes); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status CheckRerankLimits(const v1::RerankRequest& request, const ServeOptions& limits) {
  if (auto s = CheckText("query", request.query(), limits.max_text_bytes); !s.ok()) return s;
  if (auto s = CheckCount("documents", request.documents_size(), limits.max_documents_per_request,
                          "--max-documents-per-request");
      !s.ok()) {
    return s;
  }
  if (auto t = ToTruncation(request.truncation(), Truncation::kNone); !t.ok()) return t.status();
  if (auto s = CheckDirection(request.truncation_direction()); !s.ok()) return s;
  for (int d = 0; d < request.documents_size(); ++d) {
    if (auto s = CheckText("documents", d, request.documents(d), limits.max_text_bytes); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<PreparedClassify> PrepareClassify(const v1::ClassifyRequest& request, const ServeOptions& limits,
                                                 const ModelInputSpec& model) {
  if (auto s = CheckClassifyLimits(request, limits); !s.ok()) return s;
  auto truncation = ToTruncation(request.truncation(), Truncation::kLongestFirst);
  if (!truncation.ok()) return truncation.status();
  EncodeOptions encode;
  encode.max_length = model.max_length;
  encode.truncation = *truncation;
  const bool pairs = request.text_pairs_size() > 0;
  const bool left =
      request.truncation_direction() == v1::TRUNCATION_DIRECTION_LEFT && encode.truncation != Truncation::kNone;
  PreparedClassify out;
  out.inputs.reserve(request.texts_size());
  for (int i = 0; i < request.texts_size(); ++i) {
    const std::string field = absl::StrCat("texts[", i, "]");
    const std::string& text = request.texts(i);
    const std::string* pair = pairs ? &request.text_pairs(i) : nullptr;
    auto encoding = pair != nullptr ? model.tokenizer->EncodePair(text, *pair, encode)
                                    : model.tokenizer->Encode(text, encode);
    if (!encoding.ok()) return InField(field, encoding.status());
    bool truncated = false;
    if (left) {
      encoding = TruncateLeft(*model.tokenizer, text, pair, *encoding, &truncated);
      if (!encoding.ok()) return InField(field, encoding.status());
    } else if (encode.truncation != Truncation::kNone) {
      // Truncated iff a text's last kept token does not end it.
      truncated = CutAtEnd(*encoding, 0, text) || (pair != nullptr && CutAtEnd(*encoding, 1, *pair));
    }
    out.truncated.push_back(truncated);
    out.tokens.push_back(static_cast<uint32_t>(encoding->size()));
    out.inputs.push_back({Widen(encoding->ids), pairs && model.type_ids ? Widen(encoding->type_ids)
                                                                        : std::vector<int64_t>()});
  }
  return out;
}

absl::StatusOr<PreparedAnswer> PrepareAnswer(const v1::AnswerRequest& request, const ServeOptions& limits,
                                             const ModelInputSpec& model) {
  if (auto s = CheckAnswerLimits(request, limits); !s.ok()) return s;
  PreparedAnswer out;
  for (int c = 0; c < request.contexts_size(); ++c) {
    const std::string field = absl::StrCat("contexts[", c, "]");
    // Tokenizing stops once the context certainly needs more windows than
    // the request has left (issue 16, defect 2).
    const int64_t left = std::max<int64_t>(1, limits.max_windows_per_request - static_cast<int64_t>(out.inputs.size()));
    auto plan = model.tokenizer->PlanQuestionContextWindows(request.question(), request.contexts(c),
                                                            model.max_length, model.doc_stride,
                                                            /*clamp_stride=*/true, left);
    if (!plan.ok()) return InField(field, plan.status());
    if (auto s = CheckWindows(field, *plan, static_cast<int64_t>(out.inputs.size()), limits.max_windows_per_request,
                              "windows", "question", "contexts");
        !s.ok()) {
      return s;
    }
    std::vector<Window> ws = model.tokenizer->BuildWindows(*plan);
    for (Window& w : ws) {
      out.inputs.push_back(WindowInput(w, model.type_ids));
      out.window_context.push_back(static_cast<uint32_t>(c));
      out.windows.push_back(std::move(w));
    }
  }
  return out;
}

absl::StatusOr<PreparedRerank> PrepareRerank(const v1::RerankRequest& request, const ServeOptions& limits,
                                             const ModelInputSpec& model) {
  if (auto s = CheckRerankLimits(request, limits); !s.ok()) return s;
  auto truncation = ToTruncation(request.truncation(), Truncation::kNone);
  if (!truncation.ok()) return truncation.status();
  // Unspecified: chunk long documents and keep the best chunk.
  const bool chunk = request.truncation() == v1::TRUNCATION_UNSPECIFIED;
  const bool left = request.truncation_direction() == v1::TRUNCATION_DIRECTION_LEFT && *truncation != Truncation::kNone;
  const int64_t max_chunks = request.max_chunks_per_document();
  PreparedRerank out;
  for (int d = 0; d < request.documents_size(); ++d) {
    const std::string field = absl::StrCat("documents[", d, "]");
    const std::string& doc = request.documents(d);
    if (chunk) {
      const int64_t before = static_cast<int64_t>(out.inputs.size());
      const int64_t windows_left = std::max<int64_t>(1, limits.max_windows_per_request - before);
      // With max_chunks_per_document the whole document is planned (a
      // capped plan cannot be built) and its first chunks kept.
      auto plan = model.tokenizer->PlanQueryDocumentChunks(request.query(), doc, model.max_length,
                                                           model.doc_stride, /*clamp_stride=*/true,
                                                           max_chunks > 0 ? 0 : windows_left);
      if (!plan.ok()) return InField(field, plan.status());
      if (max_chunks > 0 && plan->count() > max_chunks) {
        if (max_chunks > limits.max_windows_per_request - before) {
          return absl::InvalidArgumentError(absl::StrCat(
              field, ": max_chunks_per_document ", max_chunks, " chunks, ", before + max_chunks,
              " with the documents before it; the limit is ", limits.max_windows_per_request,
              " per request (--max-windows-per-request)"));
        }
      } else if (auto s = CheckWindows(field, *plan, before, limits.max_windows_per_request, "chunks", "query",
                                       "documents");
                 !s.ok()) {
        return s;
      }
      std::vector<Window> chunks = model.tokenizer->BuildWindows(*plan);
      if (max_chunks > 0 && static_cast<int64_t>(chunks.size()) > max_chunks) chunks.resize(max_chunks);
      for (const Window& w : chunks) {
        out.inputs.push_back(WindowInput(w, model.type_ids));
        out.chunk_document.push_back(static_cast<uint32_t>(d));
        out.chunk_bytes.push_back(SecondTextRange(w));
      }
    } else {
      EncodeOptions encode;
      encode.max_length = model.max_length;
      encode.truncation = *truncation;
      auto enc = model.tokenizer->EncodePair(request.query(), doc, encode);
      if (!enc.ok()) return InField(field, enc.status());
      bool dropped = false;
      if (left) {
        enc = TruncateLeft(*model.tokenizer, request.query(), &doc, *enc, &dropped);
        if (!enc.ok()) return InField(field, enc.status());
      }
      ByteSpan range{0, 0};
      bool first_token = true;
      for (size_t t = 0; t < enc->size(); ++t) {
        if (enc->sequence_ids[t] != 1) continue;
        if (first_token && dropped) range.begin = enc->offsets[t].begin;  // left truncation cut the start
        first_token = false;
        range.end = enc->offsets[t].end;
      }
      out.inputs.push_back({Widen(enc->ids), model.type_ids ? Widen(enc->type_ids) : std::vector<int64_t>()});
      out.chunk_document.push_back(static_cast<uint32_t>(d));
      out.chunk_bytes.push_back(range);
    }
  }
  return out;
}

}  // namespace dserve
