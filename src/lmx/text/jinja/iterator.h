// Python iterators: the lazy generators that Jinja filters like map and select return, consumed once.
#pragma once

#include "lmx/text/jinja/value.h"

#include <functional>
#include <string>
#include <vector>

namespace lmx::jinja {

// A generator (or reverse iterator) whose items are produced on first use by `producer`, which
// may throw then (Jinja's filters raise lazily too). Always truthy, has no len(), and iterating
// it twice yields nothing the second time, as in Python. Prints as "<generator object NAME>".
class IteratorObject : public Object {
 public:
  // `depth` is the nesting depth of the values the producer holds (see value_depth()).
  IteratorObject(std::string type_name, std::string function_name,
                 std::function<std::vector<Value>()> producer, uint32_t depth);
  std::string type_name() const override { return type_name_; }
  std::string repr() const override;
  bool is_iterator() const override { return true; }
  std::vector<Value> consume() override;
  bool next(Value* out) override;
  uint32_t nesting_depth() const override { return depth_; }

 private:
  void produce();

  std::string type_name_;
  std::string function_name_;
  std::function<std::vector<Value>()> producer_;
  std::vector<Value> items_;
  size_t position_ = 0;
  bool produced_ = false;
  uint32_t depth_;
};

// A generator value named like Jinja's filter function (e.g. "sync_do_map") whose producer
// holds `input` and `args`.
Value make_generator(std::string function_name, const Value& input, const CallArgs& args,
                     std::function<std::vector<Value>()> producer);

}  // namespace lmx::jinja
