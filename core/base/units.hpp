#pragma once
// Data types, memory categories and unit formatting: the one place these numbers are defined.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace shardcast::core {

enum class DType : uint8_t { F32, BF16, F16, F8, I64, U8 };

constexpr int64_t itemSize(DType t) {
    switch (t) {
        case DType::F32: return 4;
        case DType::BF16: return 2;
        case DType::F16: return 2;
        case DType::F8: return 1;
        case DType::I64: return 8;
        case DType::U8: return 1;
    }
    return 0;
}

// "fp32"/"float32", "bf16"/"bfloat16", "fp16"/"float16"/"half", "fp8", "int64", "uint8".
std::optional<DType> parseDType(std::string_view name);
std::string_view dtypeName(DType t);  // canonical short name: "fp32", "bf16", ...

// PyTorch's FSDP2 memory tracker categories (torch.distributed._tools.fsdp2_mem_tracker),
// plus Runtime Overhead (CUDA context, NCCL and cuBLAS workspaces).
enum class MemCategory : uint8_t {
    ShardedParam,
    UnshardedParam,
    Buffer,
    ShardedGrad,
    UnshardedGrad,
    Activation,
    Temp,
    AllGather,
    ReduceScatter,
    OptState,
    Inputs,
    RuntimeOverhead,
};
constexpr int kMemCategoryCount = 12;
using CategoryBytes = std::array<int64_t, kMemCategoryCount>;

constexpr int index(MemCategory c) { return static_cast<int>(c); }
std::string_view categoryName(MemCategory c);  // "Sharded Param", "All Gather", ...
std::optional<MemCategory> parseCategory(std::string_view name);

constexpr int64_t kKiB = int64_t{1} << 10;
constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kGiB = int64_t{1} << 30;

std::string formatGiB(int64_t bytes, int decimals = 2);   // "12.34 GiB"
std::string formatBytes(int64_t bytes);                   // picks B / KiB / MiB / GiB
std::string formatCount(int64_t n);                       // 8,030,261,248
// A FLOP rate in the largest SI unit that keeps it at 1 or more, 3 significant digits at least:
// "989 TFLOP/s", "36.8 GFLOP/s", "1.50 MFLOP/s".
std::string formatFlopRate(double flops_per_s);

std::string toLower(std::string_view s);  // ASCII, for case-insensitive names

inline int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace shardcast::core
