#include "model/family/network.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/albert/albert_network.h"
#include "model/deberta/deberta_network.h"
#include "model/deberta_v1/deberta_v1_network.h"

namespace dserve {
namespace {

using NetworkLoader = absl::StatusOr<std::unique_ptr<Network>> (*)(const ModelConfig&, WeightStore&);

struct Family {
  const char* model_type;
  NetworkLoader load;
};

// One line per family (a third one is one more folder and one more line).
constexpr Family kFamilies[] = {
    {"deberta-v2", &LoadDebertaNetwork},
    {"albert", &LoadAlbertNetwork},
    {"deberta", &LoadDebertaV1Network},
};

}  // namespace

absl::StatusOr<std::unique_ptr<Network>> LoadNetwork(const ModelConfig& config, WeightStore& store) {
  std::vector<std::string> known;
  for (const Family& family : kFamilies) {
    if (config.model_type == family.model_type) return family.load(config, store);
    known.push_back(family.model_type);
  }
  return absl::InvalidArgumentError(absl::StrCat("config.json: model_type \"", config.model_type,
                                                 "\" has no model family (known: ", absl::StrJoin(known, ", "),
                                                 ")"));
}

}  // namespace dserve
