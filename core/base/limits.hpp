#pragma once
// Limits on what a user may ask for, chosen so that no intermediate figure of a plan overflows
// (docs/limits.md gives each limit, the real-world largest value and the product it protects).
// The loaders check them at input, with a message naming the field and the limit.
#include <cstdint>
#include <string>
#include <string_view>

#include "core/base/result.hpp"

namespace shardcast::core::limits {

// Model dimensions (HuggingFace configs and module trees). The largest public models stay far
// below: Llama-3.1-405B has hidden 16384, 126 layers, 128 heads, intermediate 53248; vocabularies
// reach 256K (Gemma); DeepSeek-V3 has 256 routed experts, Kimi K2 384.
inline constexpr int64_t kMaxHidden = int64_t{1} << 17;        // 131,072
inline constexpr int64_t kMaxHeads = 4096;
inline constexpr int64_t kMaxHeadDim = 4096;
inline constexpr int64_t kMaxIntermediate = int64_t{1} << 20;  // 1,048,576
inline constexpr int64_t kMaxVocab = int64_t{1} << 22;         // 4,194,304
inline constexpr int64_t kMaxLayers = 1024;
inline constexpr int64_t kMaxExperts = 1024;
inline constexpr int64_t kMaxPositions = int64_t{1} << 24;     // 16,777,216
// Whole-model bounds: parameters (elements, 2^42 = 4.4 trillion) and modules.
inline constexpr int64_t kMaxParams = int64_t{1} << 42;
inline constexpr int64_t kMaxModules = 250'000;
inline constexpr int64_t kMaxLayerExperts = int64_t{1} << 16;  // layers x experts (5 modules each)
// One tensor: rank and elements.
inline constexpr int64_t kMaxTensorRank = 8;
inline constexpr int64_t kMaxTensorNumel = int64_t{1} << 40;

// Module trees: module names and per-token figures of ops.
inline constexpr int64_t kMaxNameBytes = 1024;
inline constexpr int64_t kMaxNameParts = 64;                   // dotted parts of a module FQN
inline constexpr double kMaxOpFlopsPerToken = 1e15;            // per token, per op
inline constexpr double kMaxOpFlopsPerTokenSeq = 1e9;          // per token per position (attention)
inline constexpr double kMaxOpBytesPerToken = double(int64_t{1} << 40);
inline constexpr double kMaxOpBytesPerTokenSeq = double(int64_t{1} << 20);
inline constexpr double kMaxBwdFlopsFactor = 16;

// Training and cluster.
inline constexpr int64_t kMaxMicroBatch = int64_t{1} << 16;    // 65,536 sequences
inline constexpr int64_t kMaxSeqLen = int64_t{1} << 24;        // 16,777,216 tokens
inline constexpr int64_t kMaxTokensPerMicroBatch = int64_t{1} << 28;
inline constexpr int64_t kMaxGradAccum = 4096;
inline constexpr int64_t kMaxWorld = int64_t{1} << 20;         // nodes x GPUs per node
// Work of one micro-batch on one rank (forward + backward + recompute FLOPs, and bytes saved for
// backward): kept so that a step of kMaxGradAccum micro-batches sums inside int64 and its time
// at the slowest allowed GPU stays inside int64 nanoseconds.
inline constexpr double kMaxFlopsPerMicroBatch = 2.4e18;  // a quarter of INT64_MAX
inline constexpr double kMaxSavedBytesPerMicroBatch = double(int64_t{1} << 50);  // 1 PiB

// --frozen / training.frozen: std::regex compiles and matches recursively.
inline constexpr int64_t kMaxRegexBytes = 1024;
inline constexpr int64_t kMaxRegexNesting = 16;

// GPU and profile figures (both ends: a zero or a 1e-300 bandwidth, a 1e300 latency).
inline constexpr double kMinFlopsPerS = 1e9;       // 1 GFLOP/s
inline constexpr double kMaxFlopsPerS = 1e18;      // 1 EFLOP/s per GPU
inline constexpr double kMinBytesPerS = 1e6;       // 1 MB/s
inline constexpr double kMaxBytesPerS = 1e15;      // 1 PB/s
inline constexpr double kMaxLatencyS = 1.0;
inline constexpr int64_t kMinMemoryBytes = 1;  // tests model tiny GPUs; only zero is meaningless
inline constexpr int64_t kMaxMemoryBytes = int64_t{1} << 50;  // 1 PiB
inline constexpr int64_t kMaxOverheadBytes = int64_t{1} << 40;  // CUDA context, workspaces: 1 TiB

// A module FQN: at most kMaxNameBytes bytes and kMaxNameParts dotted parts. `what` names the field.
Status checkModuleName(std::string_view name, const std::string& what);

// The frozen-parameter pattern: UTF-8, at most kMaxRegexBytes bytes and kMaxRegexNesting levels of
// parentheses, and a valid ECMAScript regex. `what` names the flag or field.
Status checkFrozenPattern(const std::string& pattern, const std::string& what);

// An integer field in [lo, hi]: "<what> must be from <lo> to <hi> (got v)".
Status checkIntRange(int64_t v, int64_t lo, int64_t hi, const std::string& what);

}  // namespace shardcast::core::limits
