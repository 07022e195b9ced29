// Decoders of tokenizer.json ("decoder"): Replace, ByteFallback, Fuse, Strip, ByteLevel, Metaspace,
// BPEDecoder and Sequence, turning token strings back into text as HF tokenizers does.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace lmx::text {

class Decoder {
 public:
  virtual ~Decoder() = default;
  // HF Decoder::decode_chain: rewrites the list of token strings (it may merge them). Outputs are
  // valid UTF-8 when the inputs are (byte-level and byte-fallback bytes that do not form UTF-8
  // become U+FFFD).
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
  // Whether a ByteFallback step is part of this decoder: then a run of "<0xXX>" tokens decodes as
  // a whole (all of it becomes U+FFFD per byte if any part is not UTF-8).
  virtual bool has_byte_fallback() const { return false; }
  // HF's test for a byte-fallback token: "<0xXX>" (6 bytes) with a hex byte; returns it or -1.
  static int fallback_byte(std::string_view token);

  // Builds the decoder described by `json`; null JSON gives nullptr. Errors as Normalizer.
  static std::unique_ptr<Decoder> from_json(const nlohmann::json& json, const std::string& context = "decoder");
};

}  // namespace lmx::text
