// join_expert_rows (ops/weight.h): [E, Na, K] and [E, Nb, K] stacks become [E, Na + Nb, K], expert e's
// rows of a then its rows of b, for any dtype; mismatched stacks fail with a FormatError naming them.
#include "lmx/core/error.h"
#include "lmx/model/gemma4/gemma4_weights.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace lmx {
namespace {

TEST(JoinExpertRows, InterleavesTheStacksExpertByExpert) {
  // a [2, 1, 3] holds 100 + 10 e + k, b [2, 2, 3] holds 200 + 10 e + 3 n + k.
  std::vector<int32_t> a, b;
  for (int e = 0; e < 2; ++e)
    for (int k = 0; k < 3; ++k) a.push_back(100 + 10 * e + k);
  for (int e = 0; e < 2; ++e)
    for (int n = 0; n < 2; ++n)
      for (int k = 0; k < 3; ++k) b.push_back(200 + 10 * e + 3 * n + k);
  const Tensor joined = join_expert_rows(Tensor::from_vector(a, {2, 1, 3}), Tensor::from_vector(b, {2, 2, 3}), "t");
  ASSERT_EQ(joined.shape(), (Shape{2, 3, 3}));
  const std::vector<int32_t> want = {100, 101, 102, 200, 201, 202, 203, 204, 205,
                                     110, 111, 112, 210, 211, 212, 213, 214, 215};
  const int32_t* got = joined.data<int32_t>();
  EXPECT_EQ(std::vector<int32_t>(got, got + joined.numel()), want);
}

TEST(JoinExpertRows, RejectsStacksThatDoNotJoin) {
  const Tensor a = Tensor::zeros({2, 4, 8}, DType::kU32);
  auto expect_error = [](const Tensor& x, const Tensor& y) {
    try {
      join_expert_rows(x, y, "layer 3 experts");
      FAIL() << "no error";
    } catch (const FormatError& e) {
      EXPECT_NE(std::string(e.what()).find("layer 3 experts"), std::string::npos) << e.what();
    }
  };
  expect_error(a, Tensor::zeros({2, 4, 8}, DType::kBF16));  // dtype
  expect_error(a, Tensor::zeros({3, 4, 8}, DType::kU32));   // experts
  expect_error(a, Tensor::zeros({2, 4, 16}, DType::kU32));  // columns
  expect_error(a, Tensor::zeros({8, 4}, DType::kU32));      // not a stack
}

}  // namespace
}  // namespace lmx
