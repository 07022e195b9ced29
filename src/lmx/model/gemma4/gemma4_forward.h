// Gemma 4's forward pass, written once against the Backend op set (see docs/gemma4-transformers-notes.md
// for the semantics it follows): the family entry of the model registry.
#pragma once

#include "lmx/io/model_dir.h"
#include "lmx/model/forward.h"

#include <memory>
#include <string>

namespace lmx {

// The Gemma 4 family for a model directory whose config.json was read into `files`: config resolved,
// weights bound (memory-mapped), ready to be prepared for a backend.
std::unique_ptr<ModelForward> open_gemma4(const ModelConfigFiles& files, const std::string& dir);

}  // namespace lmx
