// Post-processors of tokenizer.json ("post_processor"): TemplateProcessing, BertProcessing,
// RobertaProcessing, ByteLevel and Sequence, for single sequences (BOS/EOS insertion).
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace lmx::text {

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  // Rewrites the ids of one encoded sequence; special tokens are added only when asked.
  virtual void process(std::vector<int32_t>& ids, bool add_special_tokens) const = 0;

  // Builds the post-processor described by `json`; null JSON gives nullptr. Errors as Normalizer.
  static std::unique_ptr<PostProcessor> from_json(const nlohmann::json& json, const std::string& context = "post_processor");
};

}  // namespace lmx::text
