// Safetensors reading (validated header, zero-copy views), sharded checkpoints, and atomic writing.
#include "lmx/io/safetensors.h"

#include "lmx/io/directory.h"
#include "lmx/io/json_input.h"
#include "lmx/io/output_file.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

namespace lmx {

namespace {

using nlohmann::json;

// Safetensors dtypes that lmx has no DType for: valid files, but unsupported.
constexpr std::string_view kForeignDTypes[] = {"BOOL",    "F64",     "I16", "U16",     "U64",     "F8_E4M3",
                                               "F8_E5M2", "F8_E8M0", "F4",  "F6_E2M3", "F6_E3M2", "C64"};

// A JSON number that is a non-negative integer fitting int64; nullopt otherwise.
std::optional<uint64_t> as_index(const json& value) {
  if (!value.is_number_unsigned()) return std::nullopt;  // negatives parse as signed, fractions as float
  uint64_t v = value.get<uint64_t>();
  if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
  return v;
}

// Parses and checks one tensor entry of the header against a data section of `data_bytes`.
TensorInfo parse_entry(const std::string& path, const std::string& name, const json& entry,
                       uint64_t data_bytes) {
  LMX_REQUIRE(FormatError, entry.is_object(), "{}: tensor '{}': header entry must be an object, got {}", path,
                       name, entry.type_name());
  auto dtype_it = entry.find("dtype");
  auto shape_it = entry.find("shape");
  auto offsets_it = entry.find("data_offsets");
  LMX_REQUIRE(FormatError, dtype_it != entry.end() && dtype_it->is_string(),
                       "{}: tensor '{}': missing string 'dtype'", path, name);
  LMX_REQUIRE(FormatError, shape_it != entry.end() && shape_it->is_array(),
                       "{}: tensor '{}': missing array 'shape'", path, name);
  LMX_REQUIRE(FormatError, offsets_it != entry.end() && offsets_it->is_array() && offsets_it->size() == 2,
                       "{}: tensor '{}': 'data_offsets' must be an array [begin, end]", path, name);

  TensorInfo info;
  const std::string& dtype_name_str = dtype_it->get_ref<const std::string&>();
  std::optional<DType> dtype = dtype_from_name(dtype_name_str);
  if (!dtype) {
    bool foreign = std::find(std::begin(kForeignDTypes), std::end(kForeignDTypes), dtype_name_str) !=
                   std::end(kForeignDTypes);
    if (foreign)
      throw Unsupported(fmt::format("{}: tensor '{}' has dtype {}, which lmx does not support", path, name,
                                    dtype_name_str));
    throw FormatError(fmt::format("{}: tensor '{}': unknown dtype '{}'", path, name, dtype_name_str));
  }
  info.dtype = *dtype;

  // numel is accumulated in the order shape_numel does, so no int64 intermediate can overflow.
  int64_t numel = 1;
  for (const json& dim : *shape_it) {
    std::optional<uint64_t> d = as_index(dim);
    if (!d)
      throw FormatError(fmt::format("{}: tensor '{}': shape entry {} is not a non-negative integer", path,
                                    name, json_preview(dim)));
    info.shape.push_back(static_cast<int64_t>(*d));
    if (__builtin_mul_overflow(numel, static_cast<int64_t>(*d), &numel))
      throw FormatError(
          fmt::format("{}: tensor '{}': shape {} overflows", path, name, json_preview(*shape_it)));
  }
  uint64_t need = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(numel), dtype_size(info.dtype), &need))
    throw FormatError(
        fmt::format("{}: tensor '{}': shape {} overflows", path, name, shape_string(info.shape)));

  std::optional<uint64_t> begin = as_index((*offsets_it)[0]);
  std::optional<uint64_t> end = as_index((*offsets_it)[1]);
  if (!begin || !end)
    throw FormatError(fmt::format("{}: tensor '{}': data_offsets {} must be non-negative integers", path,
                                  name, json_preview(*offsets_it)));
  LMX_REQUIRE(FormatError, *begin <= *end, "{}: tensor '{}': data_offsets [{}, {}] begin after end", path, name,
                       *begin, *end);
  LMX_REQUIRE(FormatError, 
      *end <= data_bytes,
      "{}: tensor '{}': data_offsets [{}, {}] out of bounds: the data section holds {} bytes "
      "(file truncated?)",
      path, name, *begin, *end, data_bytes);
  if (*end - *begin != need)
    throw FormatError(fmt::format("{}: tensor '{}': shape {} × {} needs {} bytes but data_offsets span {}",
                                  path, name, shape_string(info.shape), dtype_name(info.dtype), need,
                                  *end - *begin));
  info.begin = *begin;
  info.end = *end;
  return info;
}

std::map<std::string, std::string> parse_metadata(const std::string& path, const json& value) {
  std::map<std::string, std::string> metadata;
  if (value.is_null()) return metadata;
  LMX_REQUIRE(FormatError, value.is_object(), "{}: __metadata__ must be an object of strings, got {}", path,
                       value.type_name());
  for (const auto& [key, v] : value.items()) {
    LMX_REQUIRE(FormatError, v.is_string(), "{}: __metadata__ value for key '{}' must be a string, got {}", path,
                         key, v.type_name());
    metadata.emplace(key, v.get<std::string>());
  }
  return metadata;
}

}  // namespace

std::shared_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  auto st = std::shared_ptr<SafetensorsFile>(new SafetensorsFile());
  st->file_ = MappedFile::open(path);
  const std::byte* bytes = st->file_->data();
  const uint64_t file_size = st->file_->size();
  LMX_REQUIRE(FormatError, file_size >= 8, "{}: file of {} bytes is too short for a safetensors header", path,
                       file_size);
  uint64_t header_bytes = 0;
  for (int i = 0; i < 8; ++i) header_bytes |= static_cast<uint64_t>(bytes[i]) << (8 * i);
  LMX_REQUIRE(FormatError, header_bytes <= kMaxHeaderBytes, "{}: header length {} exceeds the limit of {} bytes",
                       path, header_bytes, kMaxHeaderBytes);
  LMX_REQUIRE(FormatError, header_bytes <= file_size - 8,
                       "{}: header length {} is larger than the {} bytes that follow it (file truncated?)",
                       path, header_bytes, file_size - 8);
  st->data_start_ = 8 + header_bytes;
  const uint64_t data_bytes = file_size - st->data_start_;

  const std::string_view header_text(reinterpret_cast<const char*>(bytes + 8), header_bytes);
  const json header = parse_json(header_text, path + ": header");
  LMX_REQUIRE(FormatError, header.is_object(), "{}: header must be a JSON object, got {}", path,
                       header.type_name());

  struct Range {
    uint64_t begin, end;
    const std::string* name;
  };
  std::vector<Range> ranges;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      st->metadata_ = parse_metadata(path, entry);
      continue;
    }
    TensorInfo info = parse_entry(path, name, entry, data_bytes);
    st->tensor_bytes_ += info.nbytes();
    auto [it, inserted] = st->tensors_.emplace(name, std::move(info));
    if (it->second.nbytes() > 0) ranges.push_back({it->second.begin, it->second.end, &it->first});
  }
  // Empty ranges touch no bytes, so they may sit anywhere; non-empty ones must be disjoint.
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  for (size_t i = 1; i < ranges.size(); ++i) {
    const Range& prev = ranges[i - 1];
    const Range& cur = ranges[i];
    LMX_REQUIRE(FormatError, prev.end <= cur.begin,
                         "{}: tensor '{}' data_offsets [{}, {}] overlap tensor '{}' [{}, {}]", path,
                         *cur.name, cur.begin, cur.end, *prev.name, prev.begin, prev.end);
  }
  return st;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& entry : tensors_) out.push_back(entry.first);
  return out;
}

const TensorInfo& SafetensorsFile::info(const std::string& name) const {
  auto it = tensors_.find(name);
  LMX_REQUIRE(FormatError, it != tensors_.end(), "{}: no tensor named '{}'", path(), name);
  return it->second;
}

Tensor SafetensorsFile::tensor(const std::string& name) const {
  const TensorInfo& ti = info(name);
  // The mapping is read-only (PROT_READ): the view's bytes must never be written.
  auto* data = const_cast<std::byte*>(file_->data()) + data_start_ + ti.begin;
  auto storage = Storage::borrow(file_, data, ti.nbytes());
  return Tensor::from_storage(std::move(storage), ti.shape, ti.dtype);
}

// ---- Checkpoint ----

namespace {

// A shard name from an index must stay inside the model directory: relative, no ".." component.
bool is_safe_relative(const std::string& name) {
  if (name.empty() || name.front() == '/') return false;
  size_t begin = 0;
  while (begin <= name.size()) {
    size_t end = name.find('/', begin);
    if (end == std::string::npos) end = name.size();
    if (name.compare(begin, end - begin, "..") == 0) return false;
    begin = end + 1;
  }
  return true;
}

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

Checkpoint Checkpoint::open_dir(const std::string& dir) {
  require_directory(dir, "model directory");
  Checkpoint ck;
  ck.dir_ = dir;
  const std::string single = join_path(dir, "model.safetensors");
  const std::string index_name = join_path(dir, "model.safetensors.index.json");

  // Adds every tensor of `file`; a name already held by an earlier file is an error.
  auto add_whole_file = [&ck](std::shared_ptr<SafetensorsFile> file) {
    size_t index = ck.files_.size();
    for (const auto& name : file->names()) {
      auto [it, inserted] = ck.where_.emplace(name, index);
      if (!inserted)
        throw FormatError(fmt::format("{}: tensor '{}' appears in both {} and {}", ck.dir_, name,
                                      ck.files_[it->second]->path(), file->path()));
      ck.total_bytes_ += file->info(name).nbytes();
    }
    ck.files_.push_back(std::move(file));
  };

  if (path_exists(single)) {
    add_whole_file(SafetensorsFile::open(single));
  } else if (path_exists(index_name)) {
    json index = load_json_file(index_name);
    LMX_REQUIRE(FormatError, index.is_object(), "{}: index must be a JSON object", index_name);
    auto weight_map = index.find("weight_map");
    LMX_REQUIRE(FormatError, weight_map != index.end() && weight_map->is_object(),
                         "{}: missing object 'weight_map'", index_name);
    std::map<std::string, size_t> shard_index;  // shard file name -> index into files_
    for (const auto& [name, shard_value] : weight_map->items()) {
      LMX_REQUIRE(FormatError, shard_value.is_string(),
                           "{}: weight_map entry for tensor '{}' must be a file name", index_name, name);
      const std::string& shard = shard_value.get_ref<const std::string&>();
      LMX_REQUIRE(FormatError, is_safe_relative(shard), "{}: tensor '{}' maps to '{}', which is not a file in {}",
                           index_name, name, shard, dir);
      auto found = shard_index.find(shard);
      if (found == shard_index.end()) {
        const std::string shard_path = join_path(dir, shard);
        LMX_REQUIRE(FormatError, path_exists(shard_path),
                    "{}: shard '{}' (holding tensor '{}') does not exist in {}", index_name, shard, name,
                    dir);
        found = shard_index.emplace(shard, ck.files_.size()).first;
        ck.files_.push_back(SafetensorsFile::open(shard_path));
      }
      const SafetensorsFile& file = *ck.files_[found->second];
      LMX_REQUIRE(FormatError, file.contains(name),
                           "{}: tensor '{}' is mapped to shard '{}', which does not contain it", index_name,
                           name, shard);
      ck.where_.emplace(name, found->second);
      ck.total_bytes_ += file.info(name).nbytes();
    }
  } else {
    // Every *.safetensors entry counts; one that is not a regular file is refused by open().
    std::vector<std::string> paths;
    for (const std::string& name : list_directory(dir))
      if (ends_with(name, ".safetensors")) paths.push_back(join_path(dir, name));
    LMX_REQUIRE(IoError, !paths.empty(),
                "{}: no model.safetensors, model.safetensors.index.json or *.safetensors files", dir);
    for (const auto& p : paths) add_whole_file(SafetensorsFile::open(p));
  }
  return ck;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(where_.size());
  for (const auto& entry : where_) out.push_back(entry.first);
  return out;
}

const SafetensorsFile& Checkpoint::file_holding(const std::string& name) const {
  auto it = where_.find(name);
  LMX_REQUIRE(FormatError, it != where_.end(), "{}: checkpoint has no tensor named '{}'", dir_, name);
  return *files_[it->second];
}

const TensorInfo& Checkpoint::info(const std::string& name) const {
  return file_holding(name).info(name);
}
Tensor Checkpoint::tensor(const std::string& name) const {
  return file_holding(name).tensor(name);
}
const std::string& Checkpoint::file_of(const std::string& name) const {
  return file_holding(name).path();
}

// ---- Writing ----

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  // The header is assembled entry by entry so that tensor order is kept in linear time.
  std::string header_text = "{";
  auto append_entry = [&](const std::string& key, const json& value) {
    if (header_text.size() > 1) header_text += ',';
    try {
      header_text += json(key).dump() + ':' + value.dump();
    } catch (const json::exception& e) {
      throw InvalidArgument(
          fmt::format("{}: tensor names and metadata must be valid UTF-8: {}", path, json_error_text(e)));
    }
  };
  if (!metadata.empty()) append_entry("__metadata__", json(metadata));
  std::set<std::string> seen;
  std::vector<Tensor> payloads;
  payloads.reserve(tensors.size());
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    LMX_REQUIRE(InvalidArgument, tensor.defined(), "{}: tensor '{}' is undefined", path, name);
    LMX_REQUIRE(InvalidArgument, name != "__metadata__",
                             "{}: '__metadata__' is reserved and cannot name a tensor", path);
    LMX_REQUIRE(InvalidArgument, seen.insert(name).second, "{}: tensor name '{}' given twice", path, name);
    payloads.push_back(tensor.is_contiguous() ? tensor : tensor.contiguous());
    uint64_t bytes = payloads.back().nbytes();
    append_entry(name, {{"dtype", std::string(dtype_name(tensor.dtype()))},
                        {"shape", tensor.shape()},
                        {"data_offsets", {offset, offset + bytes}}});
    offset += bytes;
  }
  header_text += '}';
  header_text.append((8 - header_text.size() % 8) % 8, ' ');
  std::array<unsigned char, 8> length_prefix;
  for (int i = 0; i < 8; ++i) length_prefix[i] = static_cast<unsigned char>(header_text.size() >> (8 * i));

  AtomicFileWriter out(path);
  out.write(length_prefix.data(), length_prefix.size());
  out.write(header_text.data(), header_text.size());
  for (const Tensor& t : payloads) out.write(t.raw_data(), t.nbytes());
  out.commit();
}

}  // namespace lmx
