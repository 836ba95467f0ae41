// The registry of the families' config.json rules (config_rules.h), keyed by
// model_type: one line per family; a new family is one more folder and one
// more line here. The order is the one error messages list
// ("supported: deberta-v2, albert, deberta"), and the first family also
// reads files of unknown model_type.
//
// An explicit table, not self-registration from static initialisers: a
// static library would drop a family's object file that nothing references.
// Compiled into dserve_checkpoint (torch-free), with the families' config
// sources.
#include "model/albert/albert_config.h"
#include "model/checkpoint/config_rules.h"
#include "model/deberta/deberta_config.h"
#include "model/deberta_v1/deberta_v1_config.h"

namespace dserve {

const std::vector<const FamilyConfigRules*>& FamilyConfigRegistry() {
  static const std::vector<const FamilyConfigRules*>* families = new std::vector<const FamilyConfigRules*>{
      &DebertaV2ConfigRules(),  // "deberta-v2": DeBERTa-v2/v3 (model/deberta/)
      &AlbertConfigRules(),     // "albert" (model/albert/)
      &DebertaV1ConfigRules(),  // "deberta": DeBERTa v1 (model/deberta_v1/)
  };
  return *families;
}

}  // namespace dserve
