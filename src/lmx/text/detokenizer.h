// lmx::StreamingDetokenizer: turns generated token ids into text as they arrive, never emitting
// a partial UTF-8 sequence, with the concatenated output equal to Tokenizer::decode of all ids.
#pragma once

#include "lmx/text/tokenizer.h"

#include <cstdint>
#include <string>
#include <vector>

namespace lmx {

// Works like HF tokenizers' DecodeStream: each new id is decoded together with the ids of the
// previous chunk, and the text beyond that chunk's own decode is emitted once it no longer ends
// in U+FFFD (bytes of a character that later tokens may complete). Decoder rules that depend on
// the position (Metaspace's leading space, Strip) therefore see the same context as a full
// decode. Unlike DecodeStream, text from a run of byte-fallback tokens ("<0xE2>"...) is held until
// a token that is not one ends the run (or flush): HF's ByteFallback turns a whole run into U+FFFD
// per byte when any part of it is not UTF-8, so earlier output could be contradicted. Cost per
// id: two decodes of a few tokens.
class StreamingDetokenizer {
 public:
  explicit StreamingDetokenizer(Tokenizer tokenizer, bool skip_special_tokens = false);

  // Feeds one id; returns the newly finalised text (often empty). Throws InvalidArgument for an
  // id outside the vocabulary (the stream is unchanged then).
  std::string feed(int32_t id);
  // Returns the text still held back (e.g. a trailing U+FFFD) and starts a new stream.
  std::string flush();
  // Forgets everything fed so far.
  void reset();

 private:
  // Whether the last id that reaches the decoder is a byte-fallback token.
  bool in_byte_run() const;

  Tokenizer tokenizer_;
  bool skip_special_tokens_;
  // ids_[0, prefix_count_) produced the last emitted chunk (the context); the rest is not emitted.
  std::vector<int32_t> ids_;
  std::string prefix_;  // decode of the context alone
  size_t prefix_count_ = 0;
};

}  // namespace lmx
