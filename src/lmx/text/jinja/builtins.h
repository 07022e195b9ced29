// Global functions every template sees: range, namespace, dict, joiner, and transformers' raise_exception and
// strftime_now.
#pragma once

#include "lmx/text/jinja/value.h"

#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace lmx::jinja {

// The mutable attribute bag made by namespace(...); `{% set ns.x = v %}` writes into it.
class NamespaceObject : public Object {
 public:
  std::string type_name() const override { return "Namespace"; }
  std::string repr() const override;
  Value get_attribute(const std::string& name) const override;
  void set(const std::string& name, Value value);
  void clear() {
    attributes_.clear();
    index_.clear();
  }

 private:
  std::vector<std::pair<std::string, Value>> attributes_;  // in assignment order, for repr
  std::unordered_map<std::string, size_t> index_;          // name -> position in attributes_
};

// The globals, by name. raise_exception(msg) throws TemplateError(msg); strftime_now(fmt) formats
// the local time; range() refuses more than 100000 items like Jinja's sandbox.
std::vector<std::pair<std::string, Value>> make_builtins();

}  // namespace lmx::jinja
