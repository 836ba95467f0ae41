// ALBERT's part of training (model/family/trainable_family.h), registered in
// model/family/trainable_family.cc.
#pragma once

#include "model/family/trainable_family.h"

namespace dserve {

// Fine-tuning a Hugging Face ALBERT checkpoint: classify, rerank, answer.
const TrainableFamily& AlbertTrainableFamily();

}  // namespace dserve
