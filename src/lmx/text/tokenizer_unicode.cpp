// UTF-8 validation/repair, Unicode character classes, case mapping and normalization forms.
#include "lmx/text/tokenizer_unicode.h"

#include "lmx/core/error.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>

namespace lmx::text {

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string utf8_of(char32_t cp) {
  std::string s;
  append_utf8(s, cp);
  return s;
}

namespace {

// Length of the valid UTF-8 sequence at bytes[pos], or 0 with `maximal_subpart` set to the number of
// bytes forming the maximal invalid subpart (at least 1) to replace by one U+FFFD.
size_t sequence_at(std::string_view bytes, size_t pos, size_t& maximal_subpart) {
  const auto at = [&](size_t i) { return static_cast<unsigned char>(bytes[pos + i]); };
  const size_t left = bytes.size() - pos;
  const unsigned char b0 = at(0);
  maximal_subpart = 1;
  if (b0 < 0x80) return 1;
  size_t need;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  for (size_t i = 1; i < need; ++i) {
    if (i >= left) return 0;
    const unsigned char b = at(i);
    const bool ok = i == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok) return 0;
    maximal_subpart = i + 1;
  }
  return need;
}

}  // namespace

size_t valid_utf8_prefix(std::string_view bytes) {
  size_t pos = 0;
  const size_t n = bytes.size();
  while (pos < n) {
    // ASCII fast path, 8 bytes at a time.
    while (pos + 8 <= n) {
      uint64_t word;
      __builtin_memcpy(&word, bytes.data() + pos, 8);
      if (word & 0x8080808080808080ULL) break;
      pos += 8;
    }
    if (pos >= n) break;
    const size_t len = valid_sequence_length(bytes, pos);
    if (len == 0) return pos;
    pos += len;
  }
  return n;
}

std::string to_valid_utf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() + 8);
  size_t pos = 0;
  while (pos < bytes.size()) {
    const size_t valid = valid_utf8_prefix(bytes.substr(pos));
    out.append(bytes.data() + pos, valid);
    pos += valid;
    if (pos >= bytes.size()) break;
    size_t subpart;
    sequence_at(bytes, pos, subpart);
    append_utf8(out, kReplacementChar);
    pos += subpart;
  }
  return out;
}

bool is_whitespace(char32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
  switch (cp) {
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

namespace {
utf8proc_category_t category(char32_t cp) {
  return static_cast<utf8proc_category_t>(utf8proc_category(static_cast<utf8proc_int32_t>(cp)));
}
}  // namespace

bool is_numeric(char32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  const auto c = category(cp);
  return c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_NO;
}

bool is_punctuation(char32_t cp) {
  if (cp < 0x80) {
    return (cp >= 0x21 && cp <= 0x2F) || (cp >= 0x3A && cp <= 0x40) || (cp >= 0x5B && cp <= 0x60) ||
           (cp >= 0x7B && cp <= 0x7E);
  }
  const auto c = category(cp);
  return c >= UTF8PROC_CATEGORY_PC && c <= UTF8PROC_CATEGORY_PO;
}

bool is_word_char(char32_t cp) {
  if (cp < 0x80) {
    return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || cp == '_';
  }
  if (cp == 0x200C || cp == 0x200D) return true;
  const auto c = category(cp);
  return (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_ND) || c == UTF8PROC_CATEGORY_NL ||
         c == UTF8PROC_CATEGORY_PC;
}

bool is_combining_mark(char32_t cp) {
  const auto c = category(cp);
  return c == UTF8PROC_CATEGORY_MN || c == UTF8PROC_CATEGORY_MC || c == UTF8PROC_CATEGORY_ME;
}

std::string to_lowercase(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    const auto b0 = static_cast<unsigned char>(text[pos]);
    if (b0 < 0x80) {
      out.push_back(static_cast<char>(b0 >= 'A' && b0 <= 'Z' ? b0 + 32 : b0));
      ++pos;
      continue;
    }
    const char32_t cp = next_code_point(text, pos);
    if (cp == 0x130) {  // the one unconditional multi-char lowercase mapping: İ -> i + combining dot
      out += "i\xCC\x87";
      continue;
    }
    append_utf8(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))));
  }
  return out;
}

namespace {

// A character before which `form` can split the text: NF*(a + b) == NF*(a) + NF*(b) when b starts
// with it. It must be a starter (ccc 0) that is unchanged by the form and that composes with
// nothing before it. Conservative lists: ASCII, and for the composing forms Latin-1 through Latin
// Extended-B (NFC only), kana except the voicing marks, CJK ideographs and Hangul syllables.
bool is_stable_boundary(char32_t cp, NormalizationForm form) {
  if (cp < 0x80) return true;
  const bool cjk = (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0x4E00 && cp <= 0x9FFF);
  switch (form) {
    case NormalizationForm::kNfc:
      return cp < 0x300 || cjk || (cp >= 0xAC00 && cp <= 0xD7A3) ||
             (cp >= 0x3041 && cp <= 0x30FA && cp != 0x3099 && cp != 0x309A && cp != 0x309B && cp != 0x309C);
    case NormalizationForm::kNfkc:
      return cjk || (cp >= 0xAC00 && cp <= 0xD7A3);
    case NormalizationForm::kNfd:
    case NormalizationForm::kNfkd:
      return cjk;
  }
  return false;
}

std::string utf8proc_normalize(std::string_view text, NormalizationForm form) {
  int options = UTF8PROC_STABLE;
  switch (form) {
    case NormalizationForm::kNfc: options |= UTF8PROC_COMPOSE; break;
    case NormalizationForm::kNfd: options |= UTF8PROC_DECOMPOSE; break;
    case NormalizationForm::kNfkc: options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case NormalizationForm::kNfkd: options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
  }
  utf8proc_uint8_t* result = nullptr;
  const utf8proc_ssize_t len =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()), static_cast<utf8proc_ssize_t>(text.size()),
                   &result, static_cast<utf8proc_option_t>(options));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(result, &std::free);
  LMX_REQUIRE(InvalidArgument, len >= 0, "Unicode normalization failed: {}", utf8proc_errmsg(len));
  return std::string(reinterpret_cast<const char*>(result), static_cast<size_t>(len));
}

}  // namespace

std::string normalize_unicode(std::string_view text, NormalizationForm form) {
  // Copy runs of stable characters as they are; normalize only the segments that hold others, each
  // starting at the stable character before them (a mark composes with the starter before it).
  std::string out;
  out.reserve(text.size());
  size_t segment = 0;        // start of the text not yet written
  size_t last_boundary = 0;  // start of the last stable character seen
  bool unstable = false;     // text[segment, pos) holds a character that may change
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t start = pos;
    const char32_t cp = next_code_point(text, pos);
    if (is_stable_boundary(cp, form)) {
      if (unstable) {
        out += utf8proc_normalize(text.substr(segment, start - segment), form);
        segment = start;
        unstable = false;
      }
      last_boundary = start;
    } else if (!unstable) {
      out.append(text, segment, last_boundary - segment);
      segment = last_boundary;
      unstable = true;
    }
  }
  if (unstable) out += utf8proc_normalize(text.substr(segment), form);
  else out.append(text, segment, std::string_view::npos);
  return out;
}

}  // namespace lmx::text
