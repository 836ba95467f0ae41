#include "model/tools/tokenize_command.h"

#include <string>

#include <nlohmann/json.hpp>

#include "model/family/tokenizer_for_model.h"
#include "model/tokenizer/tokenizer.h"

namespace dserve {

namespace {

bool IsBlank(const std::string& line) {
  return line.find_first_not_of(" \t\r\n") == std::string::npos;
}

}  // namespace

int RunTokenizeCommand(const std::string& model_dir, std::istream& in, std::ostream& out,
                       std::ostream& err) {
  auto tokenizer = LoadCheckpointTokenizer(model_dir);
  if (!tokenizer.ok()) {
    err << "dserve tokenize: " << tokenizer.status().message() << "\n";
    return 2;
  }
  const Tokenizer& tok = **tokenizer;
  EncodeOptions options;
  options.max_length = 0;  // no limit: show the whole encoding
  options.truncation = Truncation::kNone;
  options.return_pieces = true;

  std::string line;
  size_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (IsBlank(line)) continue;
    auto fail = [&](const std::string& why) {
      out.flush();
      err << "dserve tokenize: line " << line_no << ": " << why << "\n";
      return 1;
    };
    nlohmann::json doc = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (doc.is_discarded()) return fail("not valid JSON");
    if (!doc.is_object()) return fail("expected a JSON object");
    auto text_it = doc.find("text");
    if (text_it == doc.end() || !text_it->is_string()) return fail("\"text\" must be a string");
    const std::string& text = text_it->get_ref<const std::string&>();
    auto pair_it = doc.find("text_pair");
    absl::StatusOr<Encoding> enc;
    if (pair_it != doc.end() && !pair_it->is_null()) {
      if (!pair_it->is_string()) return fail("\"text_pair\" must be a string");
      enc = tok.EncodePair(text, pair_it->get_ref<const std::string&>(), options);
    } else {
      enc = tok.Encode(text, options);
    }
    if (!enc.ok()) return fail(std::string(enc.status().message()));
    nlohmann::json offsets = nlohmann::json::array();
    for (const ByteSpan& s : enc->offsets) offsets.push_back({s.begin, s.end});
    nlohmann::json result = {{"ids", enc->ids}, {"pieces", enc->pieces}, {"byte_offsets", offsets}};
    out << result.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  }
  out.flush();
  return 0;
}

}  // namespace dserve
