// GPT-2's byte-level alphabet: each byte maps to one printable Unicode character (bytes that are
// printable Latin-1 map to themselves, the rest to U+0100..U+0143), used by the ByteLevel
// pre-tokenizer, normalizer and decoder.
#pragma once

#include <string>
#include <string_view>

namespace lmx::text {

// Every byte of `bytes` replaced by the UTF-8 of its alphabet character.
std::string byte_level_encode(std::string_view bytes);
void append_byte_level(std::string& out, std::string_view bytes);

// The byte of an alphabet character, or -1 for characters outside the alphabet.
int byte_level_byte(char32_t cp);

}  // namespace lmx::text
