#pragma once
// The deterministic data of verify mode (`shardcast run --verify`), shared by the backends so that
// every backend checks the same rules (docs/running.md, "Verify mode"). Small integers, exact in
// bf16 (8 significant bits: every integer up to 256) and in fp32, so every sum over a group is
// exact whatever order the collective adds in.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include <fmt/format.h>

namespace shardcast::core::verify {

// Element `element` of unit `unit`'s parameters: the same on every rank.
inline float paramValue(int32_t unit, int64_t element) {
    return static_cast<float>((static_cast<int64_t>(unit) * 31 + element * 7) % 61);
}

// Element `element` of unit `unit`'s gradient on `rank`, in a group of `members` ranks: kept below
// 256 / members so that the group's sum stays exact in bf16.
inline float gradValue(int32_t unit, int32_t rank, int64_t element, int64_t members) {
    const int64_t range = std::clamp<int64_t>(256 / std::max<int64_t>(members, 1), 2, 61);  // sum < 256
    return static_cast<float>((static_cast<int64_t>(unit) * 17 + static_cast<int64_t>(rank) * 5 + element * 3) % range);
}

// Pipeline P2P: byte `i` of what stage `from_stage` sends for `micro_batch` (its activations
// forward, or its input gradient backward), so that a receiver knows what its neighbour must have
// sent. Byte i is (i x kP2PByteStride + p2pSeed(...)) mod 256 (the CUDA backend's fill kernel
// writes the same from these two).
inline constexpr int64_t kP2PByteStride = 31;
inline uint32_t p2pSeed(int32_t from_stage, int32_t micro_batch, bool activations) {
    return static_cast<uint32_t>(from_stage * 7 + micro_batch * 13 + (activations ? 0 : 5));
}
inline unsigned char p2pByte(uint32_t seed, int64_t i) {
    return static_cast<unsigned char>((i * kP2PByteStride + static_cast<int64_t>(seed)) & 0xff);
}

// bf16 is the top half of an fp32; rounding to nearest, ties to even.
inline uint16_t toBf16(float v) {
    uint32_t bits = 0;
    std::memcpy(&bits, &v, sizeof(bits));
    bits += 0x7FFFu + ((bits >> 16) & 1u);
    return static_cast<uint16_t>(bits >> 16);
}
inline float fromBf16(uint16_t h) {
    const uint32_t bits = static_cast<uint32_t>(h) << 16;
    float v = 0;
    std::memcpy(&v, &bits, sizeof(v));
    return v;
}

// Verify values in a collective's element type: encode, decode, and show in a mismatch message.
// Backends add their library's datatype (MPI_FLOAT, ncclFloat, ...).
struct F32Values {
    using T = float;
    static T enc(float v) { return v; }
    static float dec(T x) { return x; }
    static std::string show(T x) { return fmt::format("{}", x); }
};
struct Bf16Values {
    using T = uint16_t;
    static T enc(float v) { return toBf16(v); }
    static float dec(T x) { return fromBf16(x); }
    static std::string show(T x) { return fmt::format("{} (bf16 0x{:04x})", fromBf16(x), x); }
};

}  // namespace shardcast::core::verify
