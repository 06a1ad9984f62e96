#pragma once
// Integer arithmetic on products of user inputs: an overflow is reported, never wrapped into a
// negative figure (signed overflow is undefined behaviour in C++).
#include <cstdint>
#include <optional>

namespace shardcast::core {

inline std::optional<int64_t> checkedMul(int64_t a, int64_t b) {
    int64_t out = 0;
    if (__builtin_mul_overflow(a, b, &out)) return std::nullopt;
    return out;
}

inline std::optional<int64_t> checkedAdd(int64_t a, int64_t b) {
    int64_t out = 0;
    if (__builtin_add_overflow(a, b, &out)) return std::nullopt;
    return out;
}

// A double that is finite and within [lo, hi] converted to int64 (rounded to nearest); nullopt
// otherwise (a float-to-int cast out of range is undefined behaviour).
inline std::optional<int64_t> checkedRound(double x, int64_t lo, int64_t hi) {
    if (!(x >= static_cast<double>(lo) && x <= static_cast<double>(hi))) return std::nullopt;  // NaN fails too
    const double r = x < 0 ? x - 0.5 : x + 0.5;
    if (!(r > -9.2e18 && r < 9.2e18)) return std::nullopt;
    return static_cast<int64_t>(r);
}

}  // namespace shardcast::core
