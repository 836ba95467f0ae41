// DeBERTa-v2/v3's part of training (model/family/trainable_family.h),
// registered in model/family/trainable_family.cc.
#pragma once

#include "model/checkpoint/model_config.h"
#include "model/deberta/encoder.h"
#include "model/family/trainable_family.h"

namespace dserve {

// Every task, masked-LM pretraining with the EMD included, and fresh weights.
const TrainableFamily& DebertaTrainableFamily();

// The EMD adds E_pos[0..L-1] in the decoder, so the encoder weights need a
// position table even when position_biased_input is false. EncoderWeights::
// Init always makes one; a checkpoint may lack it (HF v3 files). Draws it
// (N(0, initializer_range), [max_position_embeddings, E]) when undefined and
// returns true if it did; leaves requires_grad to the caller.
bool InitEmdPositionsIfMissing(const ModelConfig& config, EncoderWeights* weights);

}  // namespace dserve
