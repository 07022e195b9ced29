// Text made safe to print on a terminal or in a log line: no control bytes, only valid UTF-8.
#pragma once

#include <string>
#include <string_view>

namespace lmx {

// `text` with everything a terminal would act on escaped, so a message that quotes hostile input
// stays one line of plain text: \n, \r and \t for those bytes, \xNN for the other C0 controls,
// DEL and every byte that is not part of valid UTF-8, \u{XXXX} for C1 controls, line/paragraph
// separators and bidirectional overrides. Printable UTF-8 passes unchanged.
std::string printable(std::string_view text);

}  // namespace lmx
