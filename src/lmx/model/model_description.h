// What the engine, the CLI and the server need to know about a loaded model, whatever its family: the
// vocabulary, special tokens, context length and each layer's KV geometry.
#pragma once

#include "lmx/kv/kv_layout.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace lmx {

struct ModelDescription {
  std::string family;      // the registry's family name, e.g. "gemma4"
  std::string model_type;  // config.json's model_type, e.g. "gemma4_text"
  int vocab_size = 0;      // token ids are in [0, vocab_size)
  int hidden_size = 0;
  int num_layers = 0;
  // Longest sequence the model was trained for (config.json's max_position_embeddings); 0 when unknown.
  int64_t context_length = 0;
  std::optional<int> bos_token_id, pad_token_id;
  std::vector<int> eos_token_ids;          // config.json's eos_token_id (one id or a list)
  std::vector<KvLayerGeometry> kv_layers;  // one per decoder layer
};

}  // namespace lmx
