// KV snapshots: the fixed prefix, the JSON header, per-block checksums, aligned payloads; loading
// validates the whole file before the cache is touched.
#include "lmx/kv/snapshot.h"

#include "lmx/core/checksum.h"
#include "lmx/core/error.h"
#include "lmx/io/json_input.h"
#include "lmx/io/mapped_file.h"
#include "lmx/io/output_file.h"

#include <nlohmann/json.hpp>

#include <cstring>

namespace lmx {

namespace {
constexpr char kMagic[8] = {'L', 'M', 'X', 'K', 'V', 'S', 'N', 'P'};
constexpr size_t kPrefixBytes = 24;
constexpr uint64_t kPayloadAlign = 4096;

uint64_t align_up(uint64_t n) {
  return (n + kPayloadAlign - 1) / kPayloadAlign * kPayloadAlign;
}

void put_u32(std::byte* at, uint32_t v) {
  for (int i = 0; i < 4; ++i) at[i] = static_cast<std::byte>(v >> (8 * i));
}
void put_u64(std::byte* at, uint64_t v) {
  for (int i = 0; i < 8; ++i) at[i] = static_cast<std::byte>(v >> (8 * i));
}
uint32_t get_u32(const std::byte* at) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(at[i]) << (8 * i);
  return v;
}
uint64_t get_u64(const std::byte* at) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(at[i]) << (8 * i);
  return v;
}

std::vector<std::string> layer_signatures(const KvLayout& layout) {
  std::vector<std::string> out;
  for (int l = 0; l < layout.num_cache_layers(); ++l) out.push_back(layout.signature(l));
  return out;
}

// A header field of the expected JSON type, else FormatError naming it.
const nlohmann::json& field(const nlohmann::json& obj, const char* key, nlohmann::json::value_t type,
                            const std::string& where) {
  auto it = obj.find(key);
  const bool number = type == nlohmann::json::value_t::number_unsigned;
  LMX_REQUIRE(FormatError, it != obj.end() && (number ? it->is_number_unsigned() : it->type() == type),
              "{}: the header's \"{}\" is missing or has the wrong type", where, key);
  return *it;
}
uint64_t unsigned_field(const nlohmann::json& obj, const char* key, const std::string& where) {
  return field(obj, key, nlohmann::json::value_t::number_unsigned, where).get<uint64_t>();
}
std::string string_field(const nlohmann::json& obj, const char* key, const std::string& where) {
  return field(obj, key, nlohmann::json::value_t::string, where).get<std::string>();
}
}  // namespace

void save_kv_snapshot(const std::string& path, KvCache& cache, const KvSequence& sequence,
                      std::span<const int32_t> tokens, const KvSnapshotIdentity& identity) {
  KvSequence& seq = cache.own(const_cast<KvSequence*>(&sequence));
  const int64_t length = seq.length();
  LMX_REQUIRE(InvalidArgument, static_cast<int64_t>(tokens.size()) >= length,
              "save KV snapshot: the sequence holds {} positions but {} tokens were given", length,
              tokens.size());
  const KvLayout& layout = cache.layout_of(seq);
  KvBlockPool& pool = cache.pool();
  KvMemory& memory = pool.memory();
  std::vector<std::byte> block;
  // Pass 1: checksums of every block (the header precedes the payloads).
  nlohmann::ordered_json groups = nlohmann::ordered_json::array();
  for (int g = 0; g < layout.num_groups(); ++g) {
    const size_t bytes = layout.group(g).block_bytes;
    block.resize(bytes);
    nlohmann::ordered_json sums = nlohmann::ordered_json::array();
    for (KvBlockId id : seq.blocks(g)) {
      memory.read(block.data(), pool.data(id), bytes);
      sums.push_back(hex64(checksum64(block.data(), bytes)));
    }
    groups.push_back({{"window", layout.group(g).window},
                      {"block_bytes", bytes},
                      {"first_block", seq.first_block(g)},
                      {"blocks", seq.blocks(g).size()},
                      {"offset", 0},
                      {"checksums", std::move(sums)}});
  }
  nlohmann::ordered_json header = {{"model", identity.model},
                                   {"tokenizer", identity.tokenizer},
                                   {"block_tokens", layout.block_tokens()},
                                   {"codec", layout.codec_description()},
                                   {"layers", layer_signatures(layout)},
                                   {"kv_quant_start", cache.quant_start()},
                                   {"before_quant_start", seq.before_quant_start()},
                                   {"length", length},
                                   {"tokens", std::vector<int32_t>(tokens.begin(), tokens.begin() + length)},
                                   {"groups", std::move(groups)}};
  // The payloads start after the header, whose size depends on the offsets' digits: leave room for 20
  // digits per offset (the placeholders are one).
  uint64_t offset =
      align_up(kPrefixBytes + header.dump().size() + 20 * static_cast<uint64_t>(layout.num_groups()));
  for (int g = 0; g < layout.num_groups(); ++g) {
    header["groups"][static_cast<size_t>(g)]["offset"] = offset;
    offset = align_up(offset + seq.blocks(g).size() * layout.group(g).block_bytes);
  }
  const std::string text = header.dump();
  std::vector<std::byte> prefix(kPrefixBytes);
  std::memcpy(prefix.data(), kMagic, 8);
  put_u32(prefix.data() + 8, kKvSnapshotVersion);
  put_u32(prefix.data() + 12, static_cast<uint32_t>(text.size()));
  put_u64(prefix.data() + 16, checksum64(text));
  AtomicFileWriter out(path);
  out.write(prefix.data(), prefix.size());
  out.write(text);
  uint64_t written = kPrefixBytes + text.size();
  const std::vector<std::byte> zeros(kPayloadAlign);
  // Pass 2: the payloads.
  for (int g = 0; g < layout.num_groups(); ++g) {
    const auto offset = header["groups"][static_cast<size_t>(g)]["offset"].get<uint64_t>();
    out.write(zeros.data(), offset - written);
    written = offset;
    const size_t bytes = layout.group(g).block_bytes;
    block.resize(bytes);
    for (KvBlockId id : seq.blocks(g)) {
      memory.read(block.data(), pool.data(id), bytes);
      out.write(block.data(), bytes);
      written += bytes;
    }
  }
  out.commit();
}

KvSnapshot load_kv_snapshot(const std::string& path, KvCache& cache, const KvSnapshotIdentity& identity) {
  const auto file = MappedFile::open(path);
  const std::string where = "KV snapshot " + path;
  const std::byte* data = file->data();
  const uint64_t size = file->size();
  LMX_REQUIRE(FormatError, size >= kPrefixBytes && std::memcmp(data, kMagic, 8) == 0,
              "{}: not an lmx KV snapshot (no LMXKVSNP magic at its start)", where);
  const uint32_t version = get_u32(data + 8);
  LMX_REQUIRE(FormatError, version == kKvSnapshotVersion, "{}: format version {}; this lmx reads version {}",
              where, version, kKvSnapshotVersion);
  const uint32_t header_bytes = get_u32(data + 12);
  LMX_REQUIRE(FormatError, header_bytes <= size - kPrefixBytes,
              "{}: truncated: its header needs {} bytes, the file has {}", where, kPrefixBytes + header_bytes,
              size);
  const std::string_view text(reinterpret_cast<const char*>(data + kPrefixBytes), header_bytes);
  LMX_REQUIRE(FormatError, checksum64(text) == get_u64(data + 16),
              "{}: the header is corrupted (checksum mismatch)", where);
  const nlohmann::json header = parse_json(text, where);
  LMX_REQUIRE(FormatError, header.is_object(), "{}: the header is not a JSON object", where);

  // Identity and layout first: they say why a file does not fit better than its bytes do.
  const std::string model = string_field(header, "model", where),
                    tokenizer = string_field(header, "tokenizer", where);
  LMX_REQUIRE(InvalidArgument, model == identity.model,
              "{} was saved from another model ({}; this model is {})", where, model, identity.model);
  LMX_REQUIRE(InvalidArgument, tokenizer == identity.tokenizer,
              "{} was saved with another tokenizer ({}; this model's is {})", where, tokenizer,
              identity.tokenizer);
  // Under a quantization start, the file holds either layout (bf16 before it, converted after).
  const uint64_t quant_start =
      header.contains("kv_quant_start") ? unsigned_field(header, "kv_quant_start", where) : 0;
  LMX_REQUIRE(InvalidArgument, quant_start == static_cast<uint64_t>(cache.quant_start()),
              "{} was saved with KV quantization start {}; this cache's is {} (--kv-quant-start)", where,
              quant_start, cache.quant_start());
  bool before_quant_start = false;
  if (header.contains("before_quant_start")) {
    LMX_REQUIRE(FormatError, header["before_quant_start"].is_boolean(),
                "{}: before_quant_start is not a boolean", where);
    before_quant_start = header["before_quant_start"].get<bool>();
  }
  LMX_REQUIRE(FormatError, !before_quant_start || cache.start_layout() != nullptr,
              "{}: bf16 KV before a quantization start, but the file names none", where);
  const KvLayout& layout = before_quant_start ? *cache.start_layout() : cache.layout();
  const uint64_t block_tokens = unsigned_field(header, "block_tokens", where);
  LMX_REQUIRE(InvalidArgument, block_tokens == static_cast<uint64_t>(layout.block_tokens()),
              "{} has KV blocks of {} tokens; this cache's hold {} (--kv-block-tokens)", where, block_tokens,
              layout.block_tokens());
  const auto& layers = field(header, "layers", nlohmann::json::value_t::array, where);
  const std::vector<std::string> signatures = layer_signatures(layout);
  LMX_REQUIRE(InvalidArgument, layers.size() == signatures.size(),
              "{} has {} KV cache layers; this model has {}", where, layers.size(), signatures.size());
  for (size_t l = 0; l < signatures.size(); ++l) {
    LMX_REQUIRE(FormatError, layers[l].is_string(), "{}: layer {}'s signature is not a string", where, l);
    LMX_REQUIRE(InvalidArgument, layers[l].get<std::string>() == signatures[l],
                "{}: KV cache layer {} was saved as {}; this cache stores {} (the codec flags must match)",
                where, l, layers[l].get<std::string>(), signatures[l]);
  }

  const uint64_t length = unsigned_field(header, "length", where);
  const auto& token_list = field(header, "tokens", nlohmann::json::value_t::array, where);
  LMX_REQUIRE(FormatError, token_list.size() == length, "{}: {} positions but {} token ids", where, length,
              token_list.size());
  KvSnapshot snapshot;
  snapshot.tokens.reserve(token_list.size());
  for (const auto& t : token_list) {
    LMX_REQUIRE(FormatError, t.is_number_integer() && t.get<int64_t>() >= 0 && t.get<int64_t>() <= INT32_MAX,
                "{}: a token id is not a non-negative 32-bit integer", where);
    snapshot.tokens.push_back(t.get<int32_t>());
  }
  const auto& groups = field(header, "groups", nlohmann::json::value_t::array, where);
  LMX_REQUIRE(FormatError, groups.size() == static_cast<size_t>(layout.num_groups()),
              "{}: {} cache groups; this layout has {}", where, groups.size(), layout.num_groups());
  const auto bt = static_cast<uint64_t>(layout.block_tokens());
  const uint64_t end_block = (length + bt - 1) / bt;
  std::vector<int64_t> first_block;
  std::vector<uint64_t> offsets;
  uint64_t payload_end = kPrefixBytes + header_bytes;
  for (int g = 0; g < layout.num_groups(); ++g) {
    const auto& group = groups[static_cast<size_t>(g)];
    const std::string at = fmt::format("{}: cache group {}", where, g);
    LMX_REQUIRE(FormatError, group.is_object(), "{} is not an object", at);
    const uint64_t block_bytes = unsigned_field(group, "block_bytes", at),
                   first = unsigned_field(group, "first_block", at),
                   blocks = unsigned_field(group, "blocks", at), offset = unsigned_field(group, "offset", at);
    LMX_REQUIRE(FormatError, block_bytes == layout.group(g).block_bytes,
                "{} has blocks of {} bytes; this layout's are {}", at, block_bytes,
                layout.group(g).block_bytes);
    LMX_REQUIRE(FormatError, first <= end_block && blocks == end_block - first,
                "{}: blocks {} from block {} do not cover {} positions", at, blocks, first, length);
    LMX_REQUIRE(FormatError, offset % kPayloadAlign == 0 && offset >= payload_end && offset <= size,
                "{}: payload offset {} is unaligned, overlaps what precedes it or lies past the end", at,
                offset);
    for (uint64_t i = payload_end; i < offset; ++i)
      LMX_REQUIRE(FormatError, data[i] == std::byte{0}, "{}: padding byte {} is not zero (corrupted)", where,
                  i);
    const auto& sums = field(group, "checksums", nlohmann::json::value_t::array, at);
    LMX_REQUIRE(FormatError, sums.size() == blocks, "{}: {} checksums for {} blocks", at, sums.size(),
                blocks);
    LMX_REQUIRE(FormatError, blocks * block_bytes <= size - offset,
                "{}: truncated: the payload ends at byte {}, the file has {}", at,
                offset + blocks * block_bytes, size);
    for (uint64_t b = 0; b < blocks; ++b) {
      LMX_REQUIRE(FormatError, sums[b].is_string(), "{}: checksum {} is not a string", at, b);
      LMX_REQUIRE(
          FormatError,
          sums[b].get<std::string>() == hex64(checksum64(data + offset + b * block_bytes, block_bytes)),
          "{}: block {} is corrupted (checksum mismatch)", at, first + b);
    }
    first_block.push_back(static_cast<int64_t>(first));
    offsets.push_back(offset);
    payload_end = offset + blocks * block_bytes;
  }
  LMX_REQUIRE(FormatError, payload_end == size, "{}: {} bytes follow the last payload", where,
              size - payload_end);

  snapshot.sequence = cache.restore_sequence(
      static_cast<int64_t>(length), first_block,
      [&](int g, int64_t b, std::span<std::byte> out) {
        const uint64_t from = offsets[static_cast<size_t>(g)] +
                              static_cast<uint64_t>(b - first_block[static_cast<size_t>(g)]) * out.size();
        std::memcpy(out.data(), data + from, out.size());
      },
      before_quant_start);
  return snapshot;
}

}  // namespace lmx
