#include "core/base/units.hpp"
#include "core/plan/training.hpp"

#include <gtest/gtest.h>

namespace sc = shardcast::core;

TEST(UnitsTest, FormatGiBUsesPowersOfTwo) {
    // 81,559 MiB (nvidia-smi total of an H100 80GB) = 79.6474609375 GiB.
    EXPECT_EQ(sc::formatGiB(int64_t{81559} * sc::kMiB), "79.65 GiB");
    EXPECT_EQ(sc::formatGiB(3 * sc::kGiB / 2), "1.50 GiB");
    EXPECT_EQ(sc::formatGiB(3 * sc::kGiB / 2, 0), "2 GiB");
    EXPECT_EQ(sc::formatGiB(0), "0.00 GiB");
    EXPECT_EQ(sc::formatGiB(sc::kGiB / 8, 3), "0.125 GiB");
}

TEST(UnitsTest, FormatBytesPicksUnit) {
    EXPECT_EQ(sc::formatFlopRate(989e12), "989 TFLOP/s");
    EXPECT_EQ(sc::formatFlopRate(36.78e9), "36.8 GFLOP/s");
    EXPECT_EQ(sc::formatFlopRate(1.5e6), "1.50 MFLOP/s");
    EXPECT_EQ(sc::formatFlopRate(2.25e15), "2.25 PFLOP/s");
    EXPECT_EQ(sc::formatFlopRate(0), "0 FLOP/s");
    EXPECT_EQ(sc::formatFlopRate(999), "999 FLOP/s");
    EXPECT_EQ(sc::formatFlopRate(1000), "1.00 kFLOP/s");
    EXPECT_EQ(sc::formatBytes(0), "0 B");
    EXPECT_EQ(sc::formatBytes(1023), "1023 B");
    EXPECT_EQ(sc::formatBytes(1536), "1.50 KiB");
    EXPECT_EQ(sc::formatBytes(3 * sc::kMiB), "3.00 MiB");
    EXPECT_EQ(sc::formatBytes(2 * sc::kGiB + sc::kGiB / 4), "2.25 GiB");
}

TEST(UnitsTest, FormatCountGroupsThousands) {
    // Llama 3.1 8B parameter count (tests/data/reference-cases.json).
    EXPECT_EQ(sc::formatCount(8030261248), "8,030,261,248");
    EXPECT_EQ(sc::formatCount(0), "0");
    EXPECT_EQ(sc::formatCount(999), "999");
    EXPECT_EQ(sc::formatCount(1000), "1,000");
    EXPECT_EQ(sc::formatCount(124439808), "124,439,808");
    EXPECT_EQ(sc::formatCount(-1234567), "-1,234,567");
}

TEST(UnitsTest, ParseDTypeAcceptsAliasesCaseInsensitively) {
    EXPECT_EQ(sc::parseDType("fp32"), sc::DType::F32);
    EXPECT_EQ(sc::parseDType("float32"), sc::DType::F32);
    EXPECT_EQ(sc::parseDType("F32"), sc::DType::F32);
    EXPECT_EQ(sc::parseDType("BF16"), sc::DType::BF16);
    EXPECT_EQ(sc::parseDType("bfloat16"), sc::DType::BF16);
    EXPECT_EQ(sc::parseDType("fp16"), sc::DType::F16);
    EXPECT_EQ(sc::parseDType("Float16"), sc::DType::F16);
    EXPECT_EQ(sc::parseDType("half"), sc::DType::F16);
    EXPECT_EQ(sc::parseDType("fp8"), sc::DType::F8);
    EXPECT_EQ(sc::parseDType("int64"), sc::DType::I64);
    EXPECT_EQ(sc::parseDType("uint8"), sc::DType::U8);
    EXPECT_FALSE(sc::parseDType("fp64").has_value());
    EXPECT_FALSE(sc::parseDType("").has_value());
    EXPECT_FALSE(sc::parseDType("bf 16").has_value());
}

TEST(UnitsTest, DTypeNamesAreCanonicalAndRoundTrip) {
    EXPECT_EQ(sc::dtypeName(sc::DType::F32), "fp32");
    EXPECT_EQ(sc::dtypeName(sc::DType::BF16), "bf16");
    EXPECT_EQ(sc::dtypeName(sc::DType::F16), "fp16");
    EXPECT_EQ(sc::dtypeName(sc::DType::F8), "fp8");
    EXPECT_EQ(sc::dtypeName(sc::DType::I64), "int64");
    EXPECT_EQ(sc::dtypeName(sc::DType::U8), "uint8");
    for (auto t : {sc::DType::F32, sc::DType::BF16, sc::DType::F16, sc::DType::F8, sc::DType::I64, sc::DType::U8}) {
        EXPECT_EQ(sc::parseDType(sc::dtypeName(t)), t);
    }
}

TEST(UnitsTest, CategoryNamesMatchPyTorchMemTracker) {
    EXPECT_EQ(sc::categoryName(sc::MemCategory::ShardedParam), "Sharded Param");
    EXPECT_EQ(sc::categoryName(sc::MemCategory::AllGather), "All Gather");
    EXPECT_EQ(sc::categoryName(sc::MemCategory::ReduceScatter), "Reduce Scatter");
    EXPECT_EQ(sc::categoryName(sc::MemCategory::OptState), "OptState");
    EXPECT_EQ(sc::categoryName(sc::MemCategory::RuntimeOverhead), "Runtime Overhead");
    for (int i = 0; i < sc::kMemCategoryCount; ++i) {
        const auto c = static_cast<sc::MemCategory>(i);
        EXPECT_EQ(sc::parseCategory(sc::categoryName(c)), c) << i;
    }
    EXPECT_EQ(sc::parseCategory("unsharded grad"), sc::MemCategory::UnshardedGrad);
    EXPECT_FALSE(sc::parseCategory("Weights").has_value());
}

TEST(TrainingNamesTest, ParseAndNameRoundTrip) {
    EXPECT_EQ(sc::parseOptimizer("AdamW"), sc::Optimizer::AdamW);
    EXPECT_EQ(sc::parseOptimizer("sgd-momentum"), sc::Optimizer::SgdMomentum);
    EXPECT_EQ(sc::optimizerName(sc::Optimizer::SgdMomentum), "sgd-momentum");
    EXPECT_FALSE(sc::parseOptimizer("lion").has_value());
    EXPECT_EQ(sc::checkpointingName(sc::Checkpointing::Full), "full");
    EXPECT_EQ(sc::checkpointingName(sc::Checkpointing::AttnCore), "attn-core");
    EXPECT_EQ(sc::parseAttention("Flash"), sc::AttentionKernel::Flash);
    EXPECT_EQ(sc::attentionName(sc::AttentionKernel::Eager), "eager");
    EXPECT_EQ(sc::parseKernelImpl("fused"), sc::KernelImpl::Fused);
    EXPECT_EQ(sc::kernelImplName(sc::KernelImpl::Eager), "eager");
    EXPECT_EQ(sc::parseOffload("CPU"), sc::Offload::Cpu);
    EXPECT_EQ(sc::offloadName(sc::Offload::None), "none");
    EXPECT_FALSE(sc::parseOffload("nvme").has_value());
}

TEST(TrainingNamesTest, OptimizerStatesPerParam) {
    EXPECT_EQ(sc::optimizerStatesPerParam(sc::Optimizer::AdamW), 2);  // exp_avg, exp_avg_sq
    EXPECT_EQ(sc::optimizerStatesPerParam(sc::Optimizer::Sgd), 0);
    EXPECT_EQ(sc::optimizerStatesPerParam(sc::Optimizer::SgdMomentum), 1);
}
