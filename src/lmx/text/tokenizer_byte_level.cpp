// GPT-2 byte <-> character tables (HF tokenizers' bytes_char).
#include "lmx/text/tokenizer_byte_level.h"

#include "lmx/text/tokenizer_unicode.h"

#include <array>
#include <cstdint>

namespace lmx::text {

namespace {

struct ByteLevelTables {
  std::array<char32_t, 256> char_of_byte{};
  std::array<std::array<char, 2>, 256> utf8_of_byte{};  // every alphabet character is 1 or 2 bytes
  std::array<uint8_t, 256> utf8_length{};
  std::array<int, 0x144> byte_of_char{};  // alphabet characters are all below U+0144

  ByteLevelTables() {
    byte_of_char.fill(-1);
    const auto printable = [](int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); };
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      char_of_byte[b] = printable(b) ? static_cast<char32_t>(b) : next++;
    }
    for (int b = 0; b < 256; ++b) {
      const std::string utf8 = utf8_of(char_of_byte[b]);
      utf8_length[b] = static_cast<uint8_t>(utf8.size());
      for (size_t i = 0; i < utf8.size(); ++i) utf8_of_byte[b][i] = utf8[i];
      byte_of_char[char_of_byte[b]] = b;
    }
  }
};

const ByteLevelTables kTables;

const ByteLevelTables& tables() { return kTables; }

}  // namespace

void append_byte_level(std::string& out, std::string_view bytes) {
  const ByteLevelTables& t = tables();
  size_t used = out.size();
  out.resize(used + bytes.size() * 2);
  char* dst = out.data();
  for (const char c : bytes) {
    const auto b = static_cast<unsigned char>(c);
    dst[used] = t.utf8_of_byte[b][0];
    dst[used + 1] = t.utf8_of_byte[b][1];
    used += t.utf8_length[b];
  }
  out.resize(used);
}

std::string byte_level_encode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  append_byte_level(out, bytes);
  return out;
}

int byte_level_byte(char32_t cp) {
  const ByteLevelTables& t = tables();
  return cp < t.byte_of_char.size() ? t.byte_of_char[cp] : -1;
}

}  // namespace lmx::text
