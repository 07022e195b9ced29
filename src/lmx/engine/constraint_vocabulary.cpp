// ConstraintVocabulary (constraint_vocabulary.h).
#include "lmx/engine/constraint_vocabulary.h"

#include "lmx/text/tokenizer.h"

namespace lmx {

ConstraintVocabulary::ConstraintVocabulary(const Tokenizer& tokenizer, int64_t vocab_size) {
  texts_.resize(static_cast<size_t>(vocab_size));
  for (int32_t id = 0; id < static_cast<int32_t>(vocab_size); ++id)
    if (tokenizer.is_valid_id(id) && !tokenizer.is_special(id))
      texts_[static_cast<size_t>(id)] = tokenizer.decode(std::span(&id, 1));
  index();
}

ConstraintVocabulary::ConstraintVocabulary(std::vector<std::string> texts) : texts_(std::move(texts)) {
  index();
}

void ConstraintVocabulary::index() {
  plain_.assign(texts_.size(), false);
  for (size_t id = 0; id < texts_.size(); ++id) {
    const std::string& t = texts_[id];
    if (t.empty()) continue;
    by_first_byte_[static_cast<uint8_t>(t[0])].push_back(static_cast<int32_t>(id));
    bool plain = true;
    for (char c : t) plain = plain && c != '"' && c != '\\' && static_cast<uint8_t>(c) >= 0x20;
    plain_[id] = plain;
  }
}

}  // namespace lmx
