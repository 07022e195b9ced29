// Typed field access for tokenizer.json components (the non-inline parts).
#include "lmx/text/tokenizer_fields.h"

#include "lmx/text/tokenizer_unicode.h"

namespace lmx::text {

std::string char_field(const nlohmann::json& j, std::string_view name, std::string_view context) {
  const std::string s = string_field(j, name, context);
  LMX_REQUIRE(FormatError, !s.empty() && is_valid_utf8(s) && utf8_length(static_cast<unsigned char>(s[0])) == s.size(),
                       "tokenizer.json: {}: field '{}' must be exactly one character, got '{}'", context, name, s);
  return s;
}

}  // namespace lmx::text
