// Normalizers of tokenizer.json ("normalizer"): Replace, Prepend, NFC/NFD/NFKC/NFKD, Lowercase,
// Strip, StripAccents, Nmt, ByteLevel and Sequence, with HF tokenizers' semantics.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <memory>
#include <string>
#include <string_view>

namespace lmx::text {

class Normalizer {
 public:
  virtual ~Normalizer() = default;

  // Normalizes one piece of input text (valid UTF-8, non-empty) in place. `at_start` says whether
  // the piece's first character is the input's first character (HF: its original offset is 0); a
  // normalizer that removes the first character clears it. Metaspace's prepend_scheme "first" reads it.
  virtual void normalize(std::string& text, bool& at_start) const = 0;

  // Builds the normalizer described by `json` (a component object); null JSON gives nullptr.
  // `context` names the component for errors ("normalizer", "normalizer.normalizers[2]", ...).
  // Throws FormatError for unknown types or bad fields, Unsupported for known HF types lmx lacks.
  static std::unique_ptr<Normalizer> from_json(const nlohmann::json& json, const std::string& context = "normalizer");
};

}  // namespace lmx::text
