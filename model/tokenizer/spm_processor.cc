#include "model/tokenizer/spm_processor.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "model/tokenizer/sentencepiece_model.pb.h"
#include "model/tokenizer/utf8.h"
#include "model/util/status_macros.h"

namespace dserve {

namespace {

int ByteFromPiece(std::string_view piece) {
  // "<0xNN>" with upper-case hex, as SentencePiece writes them.
  if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return -1;
  auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  const int hi = hex(piece[3]), lo = hex(piece[4]);
  if (hi < 0 || lo < 0) return -1;
  return hi * 16 + lo;
}

struct ScratchBuffers {
  std::string normalized;
  std::vector<uint32_t> norm_to_orig;
  std::vector<NormalizedPiece> pieces;
};

}  // namespace

absl::StatusOr<SpmModelSpec> ParseSpmModel(std::string_view serialized) {
  spm::ModelProto proto;
  if (!proto.ParseFromArray(serialized.data(), static_cast<int>(serialized.size()))) {
    return absl::InvalidArgumentError("not a SentencePiece model (ModelProto parse failed)");
  }
  const spm::TrainerSpec& ts = proto.trainer_spec();
  if (ts.model_type() != spm::TrainerSpec::UNIGRAM) {
    static const char* kNames[] = {"?", "UNIGRAM", "BPE", "WORD", "CHAR"};
    const int t = ts.model_type();
    return absl::UnimplementedError(absl::StrCat(
        "SentencePiece model type ", (t >= 1 && t <= 4) ? kNames[t] : "unknown",
        " is not supported (only UNIGRAM)"));
  }
  if (proto.pieces_size() == 0) return absl::InvalidArgumentError("SentencePiece model has no pieces");
  SpmModelSpec spec;
  spec.pieces.reserve(proto.pieces_size());
  for (const auto& p : proto.pieces()) {
    spec.pieces.push_back(p.piece());
    spec.scores.push_back(p.score());
    spec.types.push_back(static_cast<PieceType>(p.type()));
  }
  const spm::NormalizerSpec& ns = proto.normalizer_spec();
  spec.normalizer.precompiled_charsmap = ns.precompiled_charsmap();
  spec.normalizer.add_dummy_prefix = ns.add_dummy_prefix();
  spec.normalizer.remove_extra_whitespaces = ns.remove_extra_whitespaces();
  spec.normalizer.escape_whitespaces = ns.escape_whitespaces();
  spec.normalizer.treat_whitespace_as_suffix = ts.treat_whitespace_as_suffix();
  spec.byte_fallback = ts.byte_fallback();
  spec.unk_piece = ts.unk_piece();
  spec.bos_piece = ts.bos_piece();
  spec.eos_piece = ts.eos_piece();
  spec.pad_piece = ts.pad_piece();
  return spec;
}

absl::StatusOr<std::unique_ptr<SpmProcessor>> SpmProcessor::FromSpec(SpmModelSpec spec) {
  std::unique_ptr<SpmProcessor> p(new SpmProcessor());
  std::fill(std::begin(p->byte_ids_), std::end(p->byte_ids_), -1);
  p->piece_to_id_.reserve(spec.pieces.size());
  spec.normalizer.user_defined_symbols.clear();
  for (size_t i = 0; i < spec.pieces.size(); ++i) {
    const std::string& piece = spec.pieces[i];
    if (piece.empty()) return absl::InvalidArgumentError(absl::StrCat("piece ", i, " is empty"));
    if (!p->piece_to_id_.emplace(piece, static_cast<int>(i)).second) {
      return absl::InvalidArgumentError(absl::StrCat("piece '", piece, "' is defined twice"));
    }
    const PieceType t = spec.types[i];
    if (t < PieceType::kNormal || t > PieceType::kByte) {
      return absl::InvalidArgumentError(absl::StrCat("piece ", i, " has unknown type"));
    }
    if (t == PieceType::kUserDefined) spec.normalizer.user_defined_symbols.push_back(piece);
    if (t == PieceType::kByte) {
      if (!spec.byte_fallback) {
        return absl::InvalidArgumentError(
            absl::StrCat("byte piece ", piece, " found although byte_fallback is false"));
      }
      const int b = ByteFromPiece(piece);
      if (b < 0) return absl::InvalidArgumentError(absl::StrCat("byte piece ", piece, " is invalid"));
      p->byte_ids_[b] = static_cast<int>(i);
    }
  }
  if (spec.byte_fallback) {
    for (int b = 0; b < 256; ++b) {
      if (p->byte_ids_[b] < 0) {
        return absl::InvalidArgumentError("byte_fallback is true but the model lacks some of the 256 byte pieces");
      }
    }
  }
  ASSIGN_OR_RETURN(p->model_, UnigramModel::Create(spec.pieces, spec.scores, spec.types));
  ASSIGN_OR_RETURN(p->normalizer_, Normalizer::Create(spec.normalizer));
  p->spec_ = std::move(spec);
  return p;
}

absl::StatusOr<std::unique_ptr<SpmProcessor>> SpmProcessor::FromSerialized(std::string_view bytes) {
  ASSIGN_OR_RETURN(SpmModelSpec spec, ParseSpmModel(bytes));
  return FromSpec(std::move(spec));
}

absl::StatusOr<std::unique_ptr<SpmProcessor>> SpmProcessor::FromFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open SentencePiece model ", path));
  std::stringstream buf;
  buf << in.rdbuf();
  auto p = FromSerialized(buf.str());
  if (!p.ok()) {
    return absl::Status(p.status().code(), absl::StrCat(path, ": ", p.status().message()));
  }
  return p;
}

const std::string& SpmProcessor::IdToPiece(int id) const {
  static const std::string kEmpty;
  if (id < 0 || id >= piece_size()) return kEmpty;
  return spec_.pieces[id];
}

int SpmProcessor::PieceToId(std::string_view piece) const {
  auto it = piece_to_id_.find(absl::string_view(piece.data(), piece.size()));
  return it == piece_to_id_.end() ? -1 : it->second;
}

absl::Status SpmProcessor::Encode(std::string_view text, std::vector<SpmPiece>* out,
                                  std::vector<std::string>* pieces, SpmTrace* trace) const {
  out->clear();
  if (pieces) pieces->clear();
  if (trace) trace->spans.clear();
  RETURN_IF_ERROR(ValidateUtf8(text));
  thread_local ScratchBuffers scratch;
  normalizer_->Normalize(text, &scratch.normalized, &scratch.norm_to_orig);
  model_->Encode(scratch.normalized, &scratch.pieces);
  const std::string& norm = scratch.normalized;
  const std::vector<uint32_t>& n2o = scratch.norm_to_orig;
  out->reserve(scratch.pieces.size());
  const int unk = model_->unk_id();
  bool prev_unk = false;
  for (const NormalizedPiece& np : scratch.pieces) {
    const bool is_unk = np.id == unk;
    const uint32_t ob = n2o[np.begin];
    const uint32_t oe = n2o[np.end];
    if (is_unk && spec_.byte_fallback) {
      for (uint32_t i = np.begin; i < np.end; ++i) {
        const auto b = static_cast<unsigned char>(norm[i]);
        const bool last = i + 1 == np.end;
        out->push_back({byte_ids_[b], ob, last ? oe : ob});
        if (pieces) pieces->push_back(spec_.pieces[byte_ids_[b]]);
        if (trace) trace->spans.emplace_back(i, i + 1);
      }
    } else if (is_unk && prev_unk) {
      out->back().end = oe;
      if (pieces) pieces->back().append(norm, np.begin, np.end - np.begin);
      if (trace) trace->spans.back().second = np.end;
    } else {
      out->push_back({np.id, ob, oe});
      if (pieces) pieces->emplace_back(norm, np.begin, np.end - np.begin);
      if (trace) trace->spans.emplace_back(np.begin, np.end);
    }
    prev_unk = is_unk;
  }
  if (trace) {  // hand the buffers over rather than copy them
    trace->normalized.swap(scratch.normalized);
    trace->norm_to_orig.swap(scratch.norm_to_orig);
  }
  // Do not let one huge input pin memory in this thread.
  constexpr size_t kKeepBytes = size_t{4} << 20;
  if (scratch.normalized.capacity() > kKeepBytes) scratch = ScratchBuffers();
  return absl::OkStatus();
}

}  // namespace dserve
