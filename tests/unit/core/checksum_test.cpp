// checksum64: deterministic, sensitive to every byte, bit, length and seed; its two forms agree.
#include "lmx/core/checksum.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

namespace lmx {
namespace {

TEST(Checksum64, EveryLengthBitAndSeedChangesIt) {
  std::string data(200, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 37 + 11);
  std::set<uint64_t> seen;
  for (size_t n = 0; n <= data.size(); ++n) seen.insert(checksum64(std::string_view(data).substr(0, n)));
  EXPECT_EQ(seen.size(), data.size() + 1) << "every prefix length differs";
  const uint64_t whole = checksum64(data);
  for (size_t byte = 0; byte < data.size(); ++byte)
    for (int bit = 0; bit < 8; ++bit) {
      std::string flipped = data;
      flipped[byte] = static_cast<char>(flipped[byte] ^ (1 << bit));
      ASSERT_NE(checksum64(flipped), whole) << "byte " << byte << " bit " << bit;
    }
  EXPECT_NE(checksum64(data, 1), whole);
  EXPECT_EQ(checksum64(data), whole);
  EXPECT_EQ(checksum64(reinterpret_cast<const std::byte*>(data.data()), data.size()), whole);
  EXPECT_EQ(hex64(0x0123456789abcdefULL), "0123456789abcdef");
  EXPECT_EQ(hex64(0), "0000000000000000");
}

}  // namespace
}  // namespace lmx
