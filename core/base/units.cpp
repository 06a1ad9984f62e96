#include "core/base/units.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <string>
#include <utility>

#include <fmt/format.h>

namespace shardcast::core {

std::string toLower(std::string_view s) {
    std::string out(s);
    std::transform(out.begin(), out.end(), out.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return out;
}

namespace {


struct DTypeAlias {
    std::string_view name;
    DType type;
};

// The first alias of each dtype is its canonical name.
constexpr DTypeAlias kDTypeAliases[] = {
    {"fp32", DType::F32},  {"float32", DType::F32},  {"f32", DType::F32},
    {"bf16", DType::BF16}, {"bfloat16", DType::BF16},
    {"fp16", DType::F16},  {"float16", DType::F16},  {"half", DType::F16}, {"f16", DType::F16},
    {"fp8", DType::F8},
    {"int64", DType::I64}, {"i64", DType::I64},
    {"uint8", DType::U8},  {"u8", DType::U8},
};

constexpr std::string_view kCategoryNames[kMemCategoryCount] = {
    "Sharded Param", "Unsharded Param", "Buffer",  "Sharded Grad",
    "Unsharded Grad", "Activation",     "Temp",    "All Gather",
    "Reduce Scatter", "OptState",       "Inputs",  "Runtime Overhead",
};

}  // namespace

std::optional<DType> parseDType(std::string_view name) {
    const std::string key = toLower(name);
    for (const auto& alias : kDTypeAliases) {
        if (alias.name == key) return alias.type;
    }
    return std::nullopt;
}

std::string_view dtypeName(DType t) {
    for (const auto& alias : kDTypeAliases) {
        if (alias.type == t) return alias.name;
    }
    return "?";
}

std::string_view categoryName(MemCategory c) {
    const int i = index(c);
    return (i >= 0 && i < kMemCategoryCount) ? kCategoryNames[i] : std::string_view("?");
}

std::optional<MemCategory> parseCategory(std::string_view name) {
    const std::string key = toLower(name);
    for (int i = 0; i < kMemCategoryCount; ++i) {
        if (toLower(kCategoryNames[i]) == key) return static_cast<MemCategory>(i);
    }
    return std::nullopt;
}

std::string formatGiB(int64_t bytes, int decimals) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f GiB", std::max(0, decimals),
                  static_cast<double>(bytes) / static_cast<double>(kGiB));
    return buf;
}

std::string formatBytes(int64_t bytes) {
    const int64_t mag = bytes < 0 ? -bytes : bytes;
    char buf[64];
    if (mag < kKiB) {
        std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(bytes));
    } else if (mag < kMiB) {
        std::snprintf(buf, sizeof buf, "%.2f KiB", static_cast<double>(bytes) / kKiB);
    } else if (mag < kGiB) {
        std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(bytes) / kMiB);
    } else {
        std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(bytes) / kGiB);
    }
    return buf;
}

std::string formatFlopRate(double flops_per_s) {
    static constexpr std::array<std::pair<double, const char*>, 5> kUnits = {
        {{1e15, "PFLOP/s"}, {1e12, "TFLOP/s"}, {1e9, "GFLOP/s"}, {1e6, "MFLOP/s"}, {1e3, "kFLOP/s"}}};
    for (const auto& [scale, unit] : kUnits) {
        if (flops_per_s >= scale) {
            const double v = flops_per_s / scale;
            return fmt::format("{:.{}f} {}", v, v >= 100 ? 0 : v >= 10 ? 1 : 2, unit);
        }
    }
    return fmt::format("{:.0f} FLOP/s", flops_per_s);
}

std::string formatCount(int64_t n) {
    // Work on the unsigned magnitude so INT64_MIN does not overflow.
    const bool negative = n < 0;
    uint64_t mag = negative ? uint64_t{0} - static_cast<uint64_t>(n) : static_cast<uint64_t>(n);
    const std::string digits = std::to_string(mag);
    std::string out;
    out.reserve(digits.size() + digits.size() / 3 + 1);
    const size_t lead = digits.size() % 3;
    for (size_t i = 0; i < digits.size(); ++i) {
        if (i != 0 && (i + 3 - lead) % 3 == 0) out.push_back(',');
        out.push_back(digits[i]);
    }
    return negative ? "-" + out : out;
}

}  // namespace shardcast::core
