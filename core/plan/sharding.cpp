#include "core/plan/sharding.hpp"

#include <string>
#include <utility>

#include "core/base/units.hpp"

namespace shardcast::core {

namespace {


// Lower-case spellings; strategyName gives the canonical upper-case one.
constexpr std::pair<std::string_view, Strategy> kStrategyAliases[] = {
    {"no_shard", Strategy::NoShard},
    {"shard_grad_op", Strategy::ShardGradOp},
    {"full_shard", Strategy::FullShard},
    {"hybrid_shard", Strategy::HybridShard},
    {"_hybrid_shard_zero2", Strategy::HybridShardZero2},
    {"hybrid_shard_zero2", Strategy::HybridShardZero2},
    {"ddp", Strategy::NoShard},
    {"zero2", Strategy::ShardGradOp},
    {"zero3", Strategy::FullShard},
    {"hsdp", Strategy::HybridShard},
    {"hsdp-zero2", Strategy::HybridShardZero2},
    {"hsdp_zero2", Strategy::HybridShardZero2},
};

}  // namespace

std::string_view strategyName(Strategy s) {
    switch (s) {
        case Strategy::NoShard: return "NO_SHARD";
        case Strategy::ShardGradOp: return "SHARD_GRAD_OP";
        case Strategy::FullShard: return "FULL_SHARD";
        case Strategy::HybridShard: return "HYBRID_SHARD";
        case Strategy::HybridShardZero2: return "_HYBRID_SHARD_ZERO2";
    }
    return "?";
}

std::optional<Strategy> parseStrategy(std::string_view s) {
    const std::string key = toLower(s);
    for (const auto& [name, value] : kStrategyAliases) {
        if (name == key) return value;
    }
    return std::nullopt;
}

std::string_view backwardPrefetchName(ShardingSpec::BackwardPrefetch p) {
    switch (p) {
        case ShardingSpec::BackwardPrefetch::Pre: return "pre";
        case ShardingSpec::BackwardPrefetch::Post: return "post";
        case ShardingSpec::BackwardPrefetch::None: return "none";
    }
    return "?";
}

std::string_view ppScheduleName(PpSchedule s) {
    switch (s) {
        case PpSchedule::GPipe: return "GPipe";
        case PpSchedule::OneFOneB: return "1F1B";
        case PpSchedule::Interleaved1F1B: return "Interleaved1F1B";
    }
    return "?";
}

std::optional<PpSchedule> parsePpSchedule(std::string_view s) {
    const std::string k = toLower(s);
    if (k == "gpipe") return PpSchedule::GPipe;
    if (k == "1f1b") return PpSchedule::OneFOneB;
    if (k == "interleaved1f1b" || k == "interleaved-1f1b") return PpSchedule::Interleaved1F1B;
    return std::nullopt;
}

std::optional<ShardingSpec::BackwardPrefetch> parseBackwardPrefetch(std::string_view s) {
    const std::string k = toLower(s);
    if (k == "pre" || k == "backward_pre") return ShardingSpec::BackwardPrefetch::Pre;
    if (k == "post" || k == "backward_post") return ShardingSpec::BackwardPrefetch::Post;
    if (k == "none") return ShardingSpec::BackwardPrefetch::None;
    return std::nullopt;
}

std::string wrapPolicyString(const WrapPolicy& w) {
    switch (w.kind) {
        case WrapKind::Whole: return "whole";
        case WrapKind::Block: return "block";
        case WrapKind::EveryK: return "every:" + std::to_string(w.k);
        case WrapKind::MinParams: return "min-params:" + std::to_string(w.min_params);
        case WrapKind::Modules: return "modules:" + w.modules_file;
    }
    return "?";
}

bool reshardsAfterForward(const ShardingSpec& s) {
    switch (s.reshard_after_forward) {
        case ReshardMode::True:
        case ReshardMode::Count: return true;
        case ReshardMode::False: return false;
        case ReshardMode::Default: break;
    }
    // Under pipeline parallelism torchtitan's default keeps the parameters unsharded after forward
    // ("default" -> not pp_enabled, torchtitan/distributed/fsdp.py), which saves an all-gather per
    // micro-batch (rule PP1 of the lowering).
    if (s.pp > 1) return false;
    return s.strategy == Strategy::FullShard || s.strategy == Strategy::HybridShard || s.strategy == Strategy::NoShard;
}

}  // namespace shardcast::core
