// DeBERTa v1's part of training (model/family/trainable_family.h),
// registered in model/family/trainable_family.cc.
#pragma once

#include "model/family/trainable_family.h"

namespace dserve {

// From a v1 checkpoint: classify, rerank, answer, and masked LM without the EMD.
const TrainableFamily& DebertaV1TrainableFamily();

}  // namespace dserve
