// KV snapshots: one sequence's KV written to a file and loaded back into a cache of the same layout, on
// either backend (the block layout is the same on both).
//
// File format, version 1 (integers little-endian):
//   bytes 0-7     magic "LMXKVSNP"
//   bytes 8-11    format version (u32) = 1
//   bytes 12-15   header length H (u32)
//   bytes 16-23   checksum64 of the header's bytes (u64)
//   bytes 24-     the header, H bytes of JSON:
//                   {"model": model fingerprint, "tokenizer": tokenizer fingerprint,
//                    "block_tokens": N, "codec": "bf16, sliding affine4:g64",
//                    "layers": [every cache layer's signature],
//                    "kv_quant_start": N (0: none; optional), "before_quant_start": whether the KV is the
//                    bf16 one held below it, in the start layout (optional, false),
//                    "length": positions held, "tokens": [the token ids whose KV it is],
//                    "groups": [{"window", "block_bytes", "first_block", "blocks", "offset",
//                                "checksums": [checksum64 of each block, 16 hex digits]}]}
//   payloads      per cache group at its "offset" (a multiple of 4096): its blocks back to back, from
//                 first_block on; the file ends with the last payload.
// Writing goes to a temporary file beside the target, fsynced, then renamed over it. Loading checks
// everything — format, checksums, model, tokenizer, layout — before it allocates a block: a refused file
// leaves the cache as it was.
#pragma once

#include "lmx/kv/kv_cache.h"

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace lmx {

// What a snapshot's KV was computed with (io/fingerprint.h): a file from another model or tokenizer is
// refused.
struct KvSnapshotIdentity {
  std::string model;
  std::string tokenizer;
};

constexpr uint32_t kKvSnapshotVersion = 1;

// Writes `sequence` of `cache`, holding the KV of tokens[0, sequence.length()), to `path`. InvalidArgument
// when fewer tokens are given than the sequence holds or the sequence belongs to another cache; IoError
// naming the path when it cannot be written.
void save_kv_snapshot(const std::string& path, KvCache& cache, const KvSequence& sequence,
                      std::span<const int32_t> tokens, const KvSnapshotIdentity& identity);

struct KvSnapshot {
  std::vector<int32_t> tokens;           // whose KV the sequence holds
  std::unique_ptr<KvSequence> sequence;  // of the cache it was loaded into
};

// Loads the snapshot at `path` into `cache`. Throws IoError when it cannot be read; FormatError naming the
// file and what is wrong when it is not a snapshot, of another version, truncated, extended or corrupted
// (header or block checksum); InvalidArgument naming both values when it was saved from another model or
// tokenizer, or with another KV layout (codec, heads, head_dim, window, block size); KvPoolExhausted when
// its blocks do not fit the pool.
KvSnapshot load_kv_snapshot(const std::string& path, KvCache& cache, const KvSnapshotIdentity& identity);

}  // namespace lmx
