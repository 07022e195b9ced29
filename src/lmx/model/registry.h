// Model families by config.json's model_type: a new family is one folder (config, weights, forward) and one
// entry here.
#pragma once

#include "lmx/model/forward.h"

#include <memory>
#include <string>
#include <vector>

namespace lmx {

// The family forward of the model directory `dir` (config parsed, weights bound, not yet prepared for a
// backend). Unsupported naming config.json and its model_type when no family takes it.
std::unique_ptr<ModelForward> open_model_family(const std::string& dir);

// Every model_type some family takes.
std::vector<std::string> known_model_types();

}  // namespace lmx
