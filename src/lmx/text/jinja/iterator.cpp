// Python iterators: the lazy generators that Jinja filters like map and select return, consumed once.
#include "lmx/text/jinja/iterator.h"

#include <algorithm>

namespace lmx::jinja {

IteratorObject::IteratorObject(std::string type_name, std::string function_name,
                               std::function<std::vector<Value>()> producer, uint32_t depth)
    : type_name_(std::move(type_name)),
      function_name_(std::move(function_name)),
      producer_(std::move(producer)),
      depth_(depth) {
  check_value_depth(depth);
}

std::string IteratorObject::repr() const {
  if (type_name_ == "generator") return "<generator object " + function_name_ + ">";
  return "<" + type_name_ + " object>";
}

void IteratorObject::produce() {
  if (produced_) return;
  produced_ = true;  // a producer that throws leaves an exhausted iterator, like a failed generator
  auto producer = std::move(producer_);
  producer_ = nullptr;
  items_ = producer();
}

std::vector<Value> IteratorObject::consume() {
  produce();
  std::vector<Value> rest(items_.begin() + static_cast<long>(position_), items_.end());
  position_ = items_.size();
  return rest;
}

bool IteratorObject::next(Value* out) {
  produce();
  if (position_ >= items_.size()) return false;
  *out = items_[position_++];
  return true;
}

Value make_generator(std::string function_name, const Value& input, const CallArgs& args,
                     std::function<std::vector<Value>()> producer) {
  uint32_t depth = value_depth(input);
  for (const Value& v : args.positional) depth = std::max(depth, value_depth(v));
  for (const auto& [key, v] : args.keyword) depth = std::max(depth, value_depth(v));
  return Value::object(std::make_shared<IteratorObject>("generator", std::move(function_name),
                                                        std::move(producer), depth + 1));
}

}  // namespace lmx::jinja
