// Conversion of dense checkpoints to MLX affine-quantized ones (lmx convert, lmx synth --quantize).
#include "lmx/model/convert.h"

#include "lmx/core/error.h"
#include "lmx/io/directory.h"
#include "lmx/io/input_file.h"
#include "lmx/io/model_dir.h"
#include "lmx/io/output_file.h"
#include "lmx/io/safetensors.h"
#include "lmx/io/sharded_writer.h"
#include "lmx/io/staged_directory.h"
#include "lmx/model/quantization_config.h"
#include "lmx/model/registry.h"
#include "lmx/quant/affine.h"

#include <fnmatch.h>

#include <algorithm>
#include <charconv>
#include <cstring>

namespace lmx {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool matches(const std::string& pattern, const std::string& module) {
  return fnmatch(pattern.c_str(), module.c_str(), 0) == 0 || module.find(pattern) != std::string::npos;
}

int parse_int(const std::string& text, const std::string& what) {
  int value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size())
    throw InvalidArgument(fmt::format("{}: '{}' is not an integer", what, text));
  return value;
}

// Matrices quantized as modules: every 2-D or 3-D ".weight" except norms (norm weights are 1-D).
bool is_quantizable_matrix(const std::string& name, const Tensor& t) {
  return ends_with(name, ".weight") && (t.ndim() == 2 || t.ndim() == 3) && is_floating(t.dtype());
}

// quantize_affine over slices of the leading dimension, so a large table (the PLE embedding holds
// billions of values) never needs an f32 copy of itself. Identical to quantizing it whole: groups
// run along the last dimension and never cross rows.
quant::AffineQuantized quantize_in_slices(const Tensor& weight, int bits, int group_size) {
  constexpr int64_t kSliceValues = int64_t{1} << 24;
  const int64_t rows = weight.dim(0), per_row = weight.numel() / std::max<int64_t>(rows, 1);
  const int64_t step = std::max<int64_t>(1, kSliceValues / std::max<int64_t>(per_row, 1));
  if (step >= rows) return quant::quantize_affine(weight, bits, group_size, DType::kBF16);
  quant::AffineQuantized whole;
  for (int64_t r = 0; r < rows; r += step) {
    quant::AffineQuantized part =
        quant::quantize_affine(weight.slice(0, r, std::min(rows, r + step)), bits, group_size, DType::kBF16);
    if (!whole.codes.defined()) {
      auto grown = [rows](const Tensor& t) {
        Shape shape = t.shape();
        shape[0] = rows;
        return Tensor::zeros(shape, t.dtype());
      };
      whole = {grown(part.codes), grown(part.scales), grown(part.biases), part.bits, part.group_size};
    }
    for (auto [dst, src] : {std::pair{&whole.codes, &part.codes}, {&whole.scales, &part.scales},
                            {&whole.biases, &part.biases}}) {
      const size_t row_bytes = src->nbytes() / static_cast<size_t>(src->dim(0));
      std::memcpy(static_cast<std::byte*>(dst->raw_data()) + static_cast<size_t>(r) * row_bytes, src->raw_data(),
                  src->nbytes());
    }
  }
  return whole;
}

}  // namespace

QuantizeOptions parse_quantize_spec(const std::string& spec) {
  QuantizeOptions o;
  size_t colon = spec.find(':');
  o.bits = parse_int(spec.substr(0, colon), "--quantize bits");
  o.group_size = colon == std::string::npos ? 64 : parse_int(spec.substr(colon + 1), "--quantize group");
  if (!quant::valid_affine_params(o.bits, o.group_size))
    throw InvalidArgument(fmt::format("--quantize {}: bits must be 2, 3, 4, 5, 6 or 8 and the group 32, 64 or 128", spec));
  return o;
}

std::pair<std::string, int> parse_bits_for(const std::string& spec) {
  size_t eq = spec.rfind('=');
  if (eq == std::string::npos || eq == 0)
    throw InvalidArgument(fmt::format("--bits-for '{}': expected PATTERN=BITS", spec));
  int bits = parse_int(spec.substr(eq + 1), "--bits-for bits");
  if (!quant::valid_affine_params(bits, 64))
    throw InvalidArgument(fmt::format("--bits-for '{}': bits must be 2, 3, 4, 5, 6 or 8", spec));
  return {spec.substr(0, eq), bits};
}

QuantizingWriter::QuantizingWriter(ShardedWriter& out, QuantizeOptions options)
    : out_(out), options_(std::move(options)) {}

void QuantizingWriter::add(const std::string& name, const Tensor& tensor) {
  if (ends_with(name, ".scales") || ends_with(name, ".biases"))
    throw InvalidArgument(fmt::format("'{}': the checkpoint is already quantized", name));
  // HF expert stacks → MLX switch_glu modules.
  if (ends_with(name, "experts.gate_up_proj") && tensor.ndim() == 3) {
    const std::string base = name.substr(0, name.size() - std::string("gate_up_proj").size()) + "switch_glu.";
    const int64_t half = tensor.dim(1) / 2;
    add_matrix(base + "gate_proj", tensor.slice(1, 0, half).contiguous());
    add_matrix(base + "up_proj", tensor.slice(1, half, 2 * half).contiguous());
    return;
  }
  if (ends_with(name, "experts.down_proj") && tensor.ndim() == 3) {
    add_matrix(name.substr(0, name.size() - std::string("down_proj").size()) + "switch_glu.down_proj", tensor);
    return;
  }
  if (is_quantizable_matrix(name, tensor)) {
    add_matrix(name.substr(0, name.size() - std::string(".weight").size()), tensor);
    return;
  }
  out_.add(name, is_floating(tensor.dtype()) ? tensor.to(DType::kBF16) : tensor.contiguous());
}

void QuantizingWriter::add_matrix(const std::string& module, const Tensor& weight) {
  int bits = options_.bits;
  bool keep = false;
  for (const auto& pattern : options_.keep_dense) keep = keep || matches(pattern, module);
  for (const auto& [pattern, b] : options_.bits_for)
    if (matches(pattern, module)) {
      bits = b;
      break;
    }
  if (keep || weight.dim(-1) % options_.group_size != 0) {
    out_.add(module + ".weight", weight.to(DType::kBF16));
    overrides_[module] = false;
    return;
  }
  quant::AffineQuantized q = quantize_in_slices(weight, bits, options_.group_size);
  out_.add(module + ".weight", q.codes);
  out_.add(module + ".scales", q.scales);
  out_.add(module + ".biases", q.biases);
  if (bits != options_.bits) overrides_[module] = {{"group_size", options_.group_size}, {"bits", bits}};
}

nlohmann::json QuantizingWriter::quantization_block() const {
  nlohmann::json block = {{"group_size", options_.group_size}, {"bits", options_.bits}, {"mode", "affine"}};
  for (const auto& [module, value] : overrides_.items()) block[module] = value;
  return block;
}

void convert_checkpoint(const std::string& in_dir, const std::string& out_dir, const QuantizeOptions& options,
                        bool replace_existing) {
  // The source is loaded as lmx would load it (its family's config resolved, every weight bound and
  // checked) before anything is written.
  (void)open_model_family(in_dir);
  const ModelConfigFiles config = load_model_config(in_dir);
  if (QuantizationConfig::from_json(config.root, config.path).present())
    throw InvalidArgument(fmt::format("{}: the checkpoint is already quantized", config.path));
  const Checkpoint checkpoint = Checkpoint::open_dir(in_dir);
  LMX_REQUIRE(InvalidArgument, !same_or_inside(out_dir, in_dir),
              "convert: --out {} would replace the model directory {} being converted", out_dir, in_dir);
  // Files copied beside the weights, each read as the loaders read it (regular files, size caps).
  std::vector<std::pair<std::string, std::string>> copies;
  for (auto [file, kind] : {std::pair{"generation_config.json", InputKind::kConfig},
                            {"tokenizer.json", InputKind::kTokenizer},
                            {"tokenizer_config.json", InputKind::kConfig},
                            {"special_tokens_map.json", InputKind::kConfig},
                            {"chat_template.jinja", InputKind::kTemplate},
                            {"chat_template.json", InputKind::kConfig},
                            {"tokenizer.model", InputKind::kTokenizer}})
    if (auto bytes = read_input_file_if_exists(join_path(in_dir, file), kind))
      copies.emplace_back(file, std::move(*bytes));

  StagedDirectory staged(out_dir, replace_existing);
  ShardedWriter shards(staged.path());
  QuantizingWriter writer(shards, options);
  for (const auto& name : checkpoint.names()) writer.add(name, checkpoint.tensor(name));
  shards.finish();

  nlohmann::json root = config.root;
  root["quantization"] = writer.quantization_block();
  root["quantization_config"] = root["quantization"];
  write_text_file(join_path(staged.path(), "config.json"), root.dump(2) + "\n");
  for (const auto& [file, bytes] : copies) write_text_file(join_path(staged.path(), file), bytes);
  staged.commit();
}

}  // namespace lmx
