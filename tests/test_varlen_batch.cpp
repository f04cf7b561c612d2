// VarlenBatch: every constructor, the derived metadata, and one test per error class.
#include <gtest/gtest.h>

#include <limits>

#include "expect_error.h"
#include "visattn/visattn.h"

namespace visattn {
namespace {

TEST(VarlenBatch, FromCuSeqlensInt32AndInt64Agree) {
  const std::vector<int32_t> cu32 = {0, 5, 5, 12};
  const std::vector<int64_t> cu64 = {0, 5, 5, 12};
  const VarlenBatch a = VarlenBatch::from_cu_seqlens(cu32);
  const VarlenBatch b = VarlenBatch::from_cu_seqlens(cu64);
  EXPECT_EQ(a.cu_seqlens(), b.cu_seqlens());
  EXPECT_EQ(a.lengths(), (std::vector<int32_t>{5, 0, 7}));
  EXPECT_EQ(a.num_images(), 3);
  EXPECT_EQ(a.total_tokens(), 12);
  EXPECT_EQ(a.max_seqlen(), 7);
  EXPECT_FALSE(a.is_uniform());
}

TEST(VarlenBatch, FromLengthsAndUniform) {
  const std::vector<int64_t> lengths = {3, 0, 4};
  const VarlenBatch a = VarlenBatch::from_lengths(lengths);
  EXPECT_EQ(a.cu_seqlens(), (std::vector<int32_t>{0, 3, 3, 7}));
  const VarlenBatch u = VarlenBatch::uniform(4, 10);
  EXPECT_EQ(u.cu_seqlens(), (std::vector<int32_t>{0, 10, 20, 30, 40}));
  EXPECT_TRUE(u.is_uniform());
  EXPECT_EQ(u.max_seqlen(), 10);
}

TEST(VarlenBatch, EmptyBatchAndZeroLengthImagesAreValid) {
  const std::vector<int32_t> only_zero = {0};
  const VarlenBatch empty = VarlenBatch::from_cu_seqlens(only_zero);
  EXPECT_EQ(empty.num_images(), 0);
  EXPECT_EQ(empty.total_tokens(), 0);
  EXPECT_EQ(empty.max_seqlen(), 0);
  const std::vector<int32_t> zeros = {0, 0, 0, 0};
  EXPECT_EQ(VarlenBatch::from_cu_seqlens(zeros).total_tokens(), 0);
  EXPECT_EQ(VarlenBatch::uniform(0, 100).num_images(), 0);
}

TEST(VarlenBatch, MaxSeqlenIsKeptAsUpperBound) {
  const std::vector<int32_t> cu = {0, 5, 12};
  EXPECT_EQ(VarlenBatch::from_cu_seqlens(cu, 7).max_seqlen(), 7);
  EXPECT_EQ(VarlenBatch::from_cu_seqlens(cu, 4096).max_seqlen(), 4096);
}

TEST(VarlenBatch, Buckets) {
  EXPECT_EQ(VarlenBatch::uniform(0, 1).batch_bucket(), 8);
  EXPECT_EQ(VarlenBatch::uniform(8, 1).batch_bucket(), 8);
  EXPECT_EQ(VarlenBatch::uniform(9, 1).batch_bucket(), 16);
  EXPECT_EQ(VarlenBatch::uniform(33, 1).batch_bucket(), 64);
  EXPECT_EQ(VarlenBatch::uniform(65, 1).batch_bucket(), 128);
  EXPECT_EQ(VarlenBatch::uniform(200, 1).batch_bucket(), 256);
  EXPECT_EQ(VarlenBatch::uniform(1, 64).max_seqlen_bucket(), 1024);
  EXPECT_EQ(VarlenBatch::uniform(1, 1025).max_seqlen_bucket(), 2048);
  EXPECT_EQ(VarlenBatch::uniform(1, 16384).max_seqlen_bucket(), 16384);
}

TEST(VarlenBatch, ElementOffsetsAndPackedIndptrs) {
  const std::vector<int32_t> cu = {0, 2, 5};
  const VarlenBatch b = VarlenBatch::from_cu_seqlens(cu);
  EXPECT_EQ(b.element_offsets(48, "q"), (std::vector<int32_t>{0, 96, 240}));
  // q/k from a fused qkv [tokens, 3, 4, 8]: token stride 96; v alike; out contiguous 32.
  EXPECT_EQ(b.packed_indptrs(96, 96, 32),
            (std::vector<int32_t>{0, 192, 480, 0, 192, 480, 0, 64, 160}));
}

TEST(VarlenBatchErrors, EmptyCuSeqlens) {
  expect_error([] { VarlenBatch::from_cu_seqlens(std::vector<int32_t>{}); },
               ErrorCode::invalid_value, {"cu_seqlens", "empty"});
}

TEST(VarlenBatchErrors, NotStartingAtZero) {
  expect_error([] { VarlenBatch::from_cu_seqlens(std::vector<int32_t>{3, 5}); },
               ErrorCode::invalid_value, {"cu_seqlens[0]=3", "must be 0"});
}

TEST(VarlenBatchErrors, Decreasing) {
  expect_error([] { VarlenBatch::from_cu_seqlens(std::vector<int64_t>{0, 120, 100}); },
               ErrorCode::invalid_value, {"cu_seqlens[2]=100", "cu_seqlens[1]=120", "non-decreasing"});
}

TEST(VarlenBatchErrors, Int64OffsetBeyondInt32) {
  const int64_t big = int64_t(std::numeric_limits<int32_t>::max()) + 1;
  expect_error([&] { VarlenBatch::from_cu_seqlens(std::vector<int64_t>{0, big}); },
               ErrorCode::invalid_value, {"cu_seqlens[1]=2147483648", "int32"});
}

TEST(VarlenBatchErrors, MaxSeqlenBelowLongestImage) {
  expect_error([] { VarlenBatch::from_cu_seqlens(std::vector<int32_t>{0, 5, 105}, 64); },
               ErrorCode::invalid_value, {"max_seqlen=64", "100", "image 1"});
}

TEST(VarlenBatchErrors, NegativeLength) {
  expect_error([] { VarlenBatch::from_lengths(std::vector<int64_t>{4, -2}); },
               ErrorCode::invalid_value, {"lengths[1]=-2", ">= 0"});
  expect_error([] { VarlenBatch::uniform(2, -1); }, ErrorCode::invalid_value, {"seqlen=-1"});
  expect_error([] { VarlenBatch::uniform(-2, 1); }, ErrorCode::invalid_value, {"num_images=-2"});
}

TEST(VarlenBatchErrors, TotalTokensBeyondInt32) {
  expect_error([] { VarlenBatch::uniform(70000, 70000); }, ErrorCode::invalid_value,
               {"num_images * seqlen", "int32"});
  const int64_t half = int64_t(std::numeric_limits<int32_t>::max()) / 2 + 1;
  expect_error([&] { VarlenBatch::from_lengths(std::vector<int64_t>{half, half}); },
               ErrorCode::invalid_value, {"lengths", "int32"});
}

TEST(VarlenBatchErrors, ElementOffsetOverflowsInt32) {
  const VarlenBatch b = VarlenBatch::uniform(4, 100000);
  // 100000 tokens of 16 heads x 1280 fit; 200000 do not.
  expect_error([&] { b.element_offsets(16 * 1280, "v"); }, ErrorCode::invalid_value,
               {"v: element offset", "cu_seqlens[2]=200000", "overflows int32"});
  expect_error([&] { b.packed_indptrs(8, 8, 16 * 1280); }, ErrorCode::invalid_value,
               {"o: element offset"});
}

}  // namespace
}  // namespace visattn
