// Fingerprints of what a saved KV cache depends on: the model's weights and configuration, and its
// tokenizer. Equal fingerprints mean "the same files" with high probability; they are cheap to compute
// (the weights are sampled, not read whole).
#pragma once

#include <string>

namespace lmx {

// "model:<16 hex>": config.json's bytes, and per tensor (in name order) its name, dtype, shape and 16
// evenly spaced 64-byte windows of its bytes (the first and the last included). A finetune or another
// quantization of the same architecture differs. Throws as Checkpoint::open_dir and load_model_config do.
std::string model_fingerprint(const std::string& dir);
// "tokenizer:<16 hex>" over tokenizer.json and tokenizer_config.json (those present), or "tokenizer:none"
// when the directory has neither.
std::string tokenizer_fingerprint(const std::string& dir);

}  // namespace lmx
