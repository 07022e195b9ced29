// Tests for SafetensorsFile and write_safetensors: round trips, and malformed files giving clear errors.
#include "lmx/io/safetensors.h"
#include "io_test_helpers.h"
#include "lmx/io/output_file.h"

#include <gtest/gtest.h>

#include <cstring>

namespace lmx {
namespace {

using test::expect_error;
using test::raw_safetensors;

constexpr DType kAllDTypes[] = {DType::kF32, DType::kBF16, DType::kF16, DType::kI8,
                                DType::kU8,  DType::kI32,  DType::kU32, DType::kI64};

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && a.nbytes() == b.nbytes() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

TEST(Safetensors, RoundTripEveryDTypeAndShape) {
  test::TempDir dir;
  const std::vector<Shape> shapes = {{}, {0}, {7}, {2, 3}, {3, 0, 2}, {2, 3, 4}, {1, 1, 5}};
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (DType dtype : kAllDTypes)
    for (size_t s = 0; s < shapes.size(); ++s)
      tensors.emplace_back(fmt::format("layer.{}.{}", dtype_name(dtype), s),
                           test::random_any_tensor(shapes[s], dtype));
  std::map<std::string, std::string> metadata = {{"format", "pt"}, {"note", "ünïcode \"quoted\""}};
  const std::string path = dir.file("model.safetensors");
  write_safetensors(path, tensors, metadata);

  auto file = SafetensorsFile::open(path);
  EXPECT_EQ(file->path(), path);
  EXPECT_EQ(file->metadata(), metadata);
  ASSERT_EQ(file->size(), tensors.size());
  std::vector<std::string> names = file->names();
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  uint64_t total = 0;
  for (const auto& [name, expected] : tensors) {
    ASSERT_TRUE(file->contains(name));
    const TensorInfo& info = file->info(name);
    EXPECT_EQ(info.dtype, expected.dtype());
    EXPECT_EQ(info.shape, expected.shape());
    EXPECT_EQ(info.nbytes(), expected.nbytes());
    Tensor got = file->tensor(name);
    EXPECT_TRUE(same_bytes(got, expected)) << name;
    EXPECT_TRUE(got.is_contiguous());
    total += expected.nbytes();
  }
  EXPECT_EQ(file->tensor_bytes(), total);
  EXPECT_FALSE(file->contains("missing"));
}

TEST(Safetensors, HeaderIsSpacePaddedToEightBytesAndDataPacked) {
  test::TempDir dir;
  const std::string path = dir.file("a.safetensors");
  write_safetensors(path,
                    {{"a", Tensor::from_vector<float>({1, 2}, {2})}, {"b", Tensor::zeros({3}, DType::kU8)}});
  std::string bytes = test::read_file(path);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(bytes.size(), 8 + n + 8 + 3);
  std::string header = bytes.substr(8, n);
  EXPECT_EQ(header.rfind('}'), header.find_last_not_of(' '));
  // Tensors keep the given order in the header and in the data section.
  EXPECT_LT(header.find("\"a\""), header.find("\"b\""));
  EXPECT_NE(header.find("\"data_offsets\":[0,8]"), std::string::npos) << header;
  EXPECT_NE(header.find("\"data_offsets\":[8,11]"), std::string::npos) << header;
}

TEST(Safetensors, ReadsReferenceImplementationBytes) {
  // Bytes as the Python safetensors package writes {"w": torch.tensor([1.0, -2.0])}.
  test::TempDir dir;
  std::string header =
      R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string bytes = raw_safetensors(header, 0);
  float values[2] = {1.0f, -2.0f};
  bytes.append(reinterpret_cast<const char*>(values), 8);
  write_text_file(dir.file("w.safetensors"), bytes);
  auto file = SafetensorsFile::open(dir.file("w.safetensors"));
  Tensor w = file->tensor("w");
  EXPECT_EQ(w.item_f32(0), 1.0f);
  EXPECT_EQ(w.item_f32(1), -2.0f);
  EXPECT_EQ(file->metadata().at("format"), "pt");
}

TEST(Safetensors, ViewsAreZeroCopyAndOutliveTheFileObject) {
  test::TempDir dir;
  const std::string path = dir.file("m.safetensors");
  Tensor expected = test::random_tensor({4, 5}, DType::kBF16);
  write_safetensors(path, {{"x", expected}});
  auto file = SafetensorsFile::open(path);
  Tensor a = file->tensor("x");
  Tensor b = file->tensor("x");
  EXPECT_EQ(a.raw_data(), b.raw_data());
  file.reset();
  EXPECT_TRUE(same_bytes(a, expected));
}

TEST(Safetensors, WritesNonContiguousTensorsAsContiguous) {
  test::TempDir dir;
  Tensor full = test::random_tensor({3, 6});
  Tensor part = full.slice(1, 2, 5);
  ASSERT_FALSE(part.is_contiguous());
  write_safetensors(dir.file("s.safetensors"), {{"part", part}});
  Tensor got = SafetensorsFile::open(dir.file("s.safetensors"))->tensor("part");
  EXPECT_TRUE(same_bytes(got, part.contiguous()));
}

TEST(Safetensors, WriteReplacesAtomicallyAndLeavesNoTemporaries) {
  test::TempDir dir;
  const std::string path = dir.file("r.safetensors");
  write_safetensors(path, {{"a", Tensor::zeros({100}, DType::kF32)}});
  write_safetensors(path, {{"b", Tensor::zeros({2}, DType::kI64)}});
  auto file = SafetensorsFile::open(path);
  EXPECT_EQ(file->names(), std::vector<std::string>{"b"});
  EXPECT_EQ(test::count_entries(dir.path()), 1);
}

TEST(Safetensors, WriteRejectsBadArgumentsAndUnwritablePaths) {
  test::TempDir dir;
  Tensor t = Tensor::zeros({2}, DType::kF32);
  expect_error<InvalidArgument>(
      [&] {
        write_safetensors(dir.file("x"), {{"a", t}, {"a", t}});
      },
      {"'a' given twice"});
  expect_error<InvalidArgument>(
      [&] {
        write_safetensors(dir.file("x"), {{"__metadata__", t}});
      },
      {"reserved"});
  expect_error<InvalidArgument>(
      [&] {
        write_safetensors(dir.file("x"), {{"u", Tensor()}});
      },
      {"'u' is undefined"});
  const std::string bad = dir.file("no/such/dir/x.safetensors");
  expect_error<IoError>([&] { write_safetensors(bad, {{"a", t}}); }, {bad, "cannot create"});
  EXPECT_FALSE(test::exists(dir.file("x")));
}

// ---- Malformed files ----

class MalformedSafetensors : public ::testing::Test {
 protected:
  // Writes `bytes` to a fresh file and returns its path.
  std::string put(const std::string& bytes) {
    std::string path = dir_.file(fmt::format("bad{}.safetensors", count_++));
    write_text_file(path, bytes);
    return path;
  }
  // Expects open() of a file holding `bytes` to throw E naming the file and every substring.
  template <typename E = FormatError>
  void expect_open_error(const std::string& bytes, std::vector<std::string> substrings) {
    std::string path = put(bytes);
    substrings.push_back(path);
    expect_error<E>([&] { SafetensorsFile::open(path); }, substrings);
  }
  static std::string entry(const std::string& name, const std::string& dtype, const std::string& shape,
                           const std::string& offsets) {
    return fmt::format(R"("{}":{{"dtype":"{}","shape":{},"data_offsets":{}}})", name, dtype, shape, offsets);
  }
  // A JSON object from "key":value members.
  static std::string object(const std::vector<std::string>& members) {
    std::string out = "{";
    for (size_t i = 0; i < members.size(); ++i) out.append(i ? "," : "").append(members[i]);
    return out.append("}");
  }
  test::TempDir dir_;
  int count_ = 0;
};

TEST_F(MalformedSafetensors, TruncatedAnywhere) {
  test::TempDir dir;
  write_safetensors(dir.file("ok.safetensors"),
                    {{"a", test::random_tensor({8, 4})}, {"b", test::random_tensor({5})}});
  std::string bytes = test::read_file(dir.file("ok.safetensors"));
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  for (size_t cut : {size_t{0}, size_t{3}, size_t{7}}) expect_open_error(bytes.substr(0, cut), {"too short"});
  for (size_t cut : {size_t{8}, size_t{12}, static_cast<size_t>(8 + n / 2), static_cast<size_t>(8 + n - 1),
                     static_cast<size_t>(8 + n), static_cast<size_t>(8 + n + 1),
                     static_cast<size_t>(8 + n + 130), bytes.size() - 1})
    expect_open_error(bytes.substr(0, cut), {"truncated"});
}

TEST_F(MalformedSafetensors, HeaderLengthLargerThanFile) {
  std::string header = object({entry("t", "U8", "[1]", "[0,1]")});
  expect_open_error(raw_safetensors(header, 1, header.size() + 2), {"header length", "larger than"});
}

TEST_F(MalformedSafetensors, HeaderLengthAbsurd) {
  expect_open_error(raw_safetensors("{}", 0, uint64_t{1} << 63), {"exceeds the limit"});
  expect_open_error(raw_safetensors("{}", 0, ~uint64_t{0}), {"exceeds the limit"});
}

TEST_F(MalformedSafetensors, HeaderNotJson) {
  expect_open_error(raw_safetensors("{\"a\": ", 0), {"header: invalid JSON", "unexpected end of input"});
  expect_open_error(raw_safetensors(std::string("{}\0\0", 4), 0), {"header: invalid JSON", "NUL byte"});
  expect_open_error(raw_safetensors("\xff\xfe{}", 0), {"header: invalid JSON"});
  expect_open_error(raw_safetensors("", 0), {"header: invalid JSON"});
}

TEST_F(MalformedSafetensors, HeaderNotAnObject) {
  expect_open_error(raw_safetensors("[1, 2]", 0), {"must be a JSON object", "array"});
  expect_open_error(raw_safetensors("42", 0), {"must be a JSON object"});
  // Deep nesting must not exhaust the stack: refused before parsing.
  expect_open_error(raw_safetensors(std::string(200000, '[') + std::string(200000, ']'), 0),
                    {"header: invalid JSON", "nested deeper than 128 levels"});
}

TEST_F(MalformedSafetensors, EntryNotAnObjectOrMissingFields) {
  expect_open_error(raw_safetensors(R"({"t": 3})", 0), {"tensor 't'", "must be an object"});
  expect_open_error(raw_safetensors(R"({"t": {"shape": [1], "data_offsets": [0, 1]}})", 1),
                    {"tensor 't'", "dtype"});
  expect_open_error(raw_safetensors(R"({"t": {"dtype": "U8", "data_offsets": [0, 1]}})", 1),
                    {"tensor 't'", "shape"});
  expect_open_error(raw_safetensors(R"({"t": {"dtype": "U8", "shape": [1]}})", 1),
                    {"tensor 't'", "data_offsets"});
  expect_open_error(raw_safetensors(object({entry("t", "U8", "[1]", "[0,1,2]")}), 2),
                    {"tensor 't'", "data_offsets"});
  expect_open_error(raw_safetensors(R"({"t": {"dtype": 5, "shape": [1], "data_offsets": [0, 1]}})", 1),
                    {"dtype"});
}

TEST_F(MalformedSafetensors, UnknownDType) {
  expect_open_error(raw_safetensors(object({entry("w.q", "F13", "[1]", "[0,4]")}), 4),
                    {"tensor 'w.q'", "unknown dtype 'F13'"});
  expect_open_error<Unsupported>(raw_safetensors(object({entry("w.d", "F64", "[1]", "[0,8]")}), 8),
                                 {"tensor 'w.d'", "F64", "not support"});
}

TEST_F(MalformedSafetensors, BadShape) {
  expect_open_error(raw_safetensors(object({entry("s", "U8", "[-1]", "[0,0]")}), 0),
                    {"tensor 's'", "shape entry -1"});
  expect_open_error(raw_safetensors(object({entry("s", "U8", "[1.5]", "[0,1]")}), 1),
                    {"tensor 's'", "shape entry 1.5"});
  expect_open_error(raw_safetensors(object({entry("s", "U8", "[\"2\"]", "[0,2]")}), 2), {"shape entry"});
  expect_open_error(raw_safetensors(object({entry("s", "U8", "{}", "[0,2]")}), 2), {"shape"});
  expect_open_error(
      raw_safetensors(object({entry("s", "U8", "[4294967296,4294967296,4294967296]", "[0,0]")}), 0),
      {"tensor 's'", "overflows"});
  expect_open_error(raw_safetensors(object({entry("s", "I64", "[4611686018427387904]", "[0,0]")}), 0),
                    {"tensor 's'", "overflows"});
  expect_open_error(raw_safetensors(object({entry("s", "U8", "[99999999999999999999]", "[0,0]")}), 0),
                    {"tensor 's'", "shape entry"});
}

TEST_F(MalformedSafetensors, ShapeTimesDTypeDiffersFromByteRange) {
  expect_open_error(
      raw_safetensors(object({entry("model.norm.weight", "BF16", "[64]", "[0,126]")}), 128),
      {"tensor 'model.norm.weight': shape [64] × BF16 needs 128 bytes but data_offsets span 126"});
  expect_open_error(raw_safetensors(object({entry("z", "F32", "[0]", "[0,4]")}), 4),
                    {"needs 0 bytes", "span 4"});
}

TEST_F(MalformedSafetensors, OffsetsOutOfBoundsOrReversedOrNegative) {
  expect_open_error(raw_safetensors(object({entry("o", "U8", "[4]", "[10,14]")}), 12),
                    {"tensor 'o'", "out of bounds"});
  expect_open_error(raw_safetensors(object({entry("o", "U8", "[0]", "[13,13]")}), 12), {"out of bounds"});
  expect_open_error(raw_safetensors(object({entry("o", "U8", "[1]", "[5,4]")}), 12),
                    {"tensor 'o'", "begin after end"});
  expect_open_error(raw_safetensors(object({entry("o", "U8", "[1]", "[-1,0]")}), 12),
                    {"tensor 'o'", "non-negative"});
  expect_open_error(raw_safetensors(object({entry("o", "U8", "[1]", "[0,1.0]")}), 12),
                    {"tensor 'o'", "non-negative"});
  expect_open_error(
      raw_safetensors(object({entry("o", "U8", "[1]", "[18446744073709551615,18446744073709551616]")}), 12),
      {"tensor 'o'"});
}

TEST_F(MalformedSafetensors, OverlappingRanges) {
  std::string header = object({entry("a", "U8", "[8]", "[0,8]") + "," + entry("b", "U8", "[4]", "[6,10]")});
  expect_open_error(raw_safetensors(header, 16), {"overlap", "'a'", "'b'"});
  header = object({entry("a", "U8", "[8]", "[0,8]") + "," + entry("b", "U8", "[8]", "[0,8]")});
  expect_open_error(raw_safetensors(header, 16), {"overlap"});
  // Gaps and empty tensors anywhere are fine.
  header = object({entry("a", "U8", "[4]", "[0,4]") + "," + entry("e", "U8", "[0]", "[2,2]") + "," +
                   entry("b", "U8", "[4]", "[8,12]")});
  auto file = SafetensorsFile::open(put(raw_safetensors(header, 16)));
  EXPECT_EQ(file->names(), (std::vector<std::string>{"a", "b", "e"}));
  EXPECT_EQ(file->tensor("e").numel(), 0);
  EXPECT_EQ(static_cast<const unsigned char*>(file->tensor("b").raw_data())[0],
            static_cast<unsigned char>(8 * 7 + 1));
}

TEST_F(MalformedSafetensors, MetadataNotStringToString) {
  expect_open_error(raw_safetensors(R"({"__metadata__": {"format": 1}})", 0),
                    {"__metadata__", "'format'", "string"});
  expect_open_error(raw_safetensors(R"({"__metadata__": ["a"]})", 0), {"__metadata__", "object"});
  expect_open_error(raw_safetensors(R"({"__metadata__": {"a": {"b": "c"}}})", 0), {"__metadata__"});
}

TEST_F(MalformedSafetensors, MissingTensorLookup) {
  auto file = SafetensorsFile::open(put(raw_safetensors(object({entry("a", "U8", "[1]", "[0,1]")}), 1)));
  expect_error<FormatError>([&] { file->tensor("lm_head.weight"); }, {file->path(), "'lm_head.weight'"});
  expect_error<FormatError>([&] { file->info("b"); }, {file->path(), "'b'"});
}

TEST_F(MalformedSafetensors, NotAFile) {
  expect_error<IoError>([&] { SafetensorsFile::open(dir_.path()); }, {dir_.path()});
  expect_error<IoError>([&] { SafetensorsFile::open(dir_.file("absent.safetensors")); },
                        {"absent.safetensors"});
}

}  // namespace
}  // namespace lmx
