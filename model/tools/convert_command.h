// `dserve convert`: writes a safetensors checkpoint directory from any
// checkpoint dserve reads (pytorch_model.bin, its shards, or safetensors).
#pragma once

#include <iosfwd>
#include <string>

namespace dserve {

struct ConvertCommandOptions {
  std::string model_dir;  // the checkpoint to read
  std::string out_dir;    // must not exist yet
};

// Writes out_dir/model.safetensors with every tensor of the checkpoint under
// its own name and stored dtype (metadata {"format": "pt"}, as transformers
// expects), and copies every other regular file of the checkpoint directory
// byte for byte (config.json, spm.model, tokenizer files, ...), except the
// weight files it replaces and other pickles (*.bin, *.pt, *.pth: skipped,
// and said so on `err`). The directory is written under a temporary name,
// fsynced and renamed into place, so `out_dir` is complete or absent. Prints
// one summary line on `out`. Returns 0, 2 when the checkpoint cannot be read
// (the message names the file, as `serve` does), 1 for any other failure
// (out_dir exists, cannot be written).
int RunConvertCommand(const ConvertCommandOptions& options, std::ostream& out, std::ostream& err);

}  // namespace dserve
