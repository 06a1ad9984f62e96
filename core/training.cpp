#include "core/training.hpp"

#include <charconv>

#include <algorithm>
#include <cctype>
#include <utility>

namespace shardcast::core {

namespace {

bool iequals(std::string_view a, std::string_view b) {
    return a.size() == b.size() &&
           std::equal(a.begin(), a.end(), b.begin(), [](unsigned char x, unsigned char y) {
               return std::tolower(x) == std::tolower(y);
           });
}

template <class E, size_t N>
std::optional<E> lookup(const std::pair<std::string_view, E> (&table)[N], std::string_view s) {
    for (const auto& [name, value] : table) {
        if (iequals(name, s)) return value;
    }
    return std::nullopt;
}

template <class E, size_t N>
std::string_view nameOf(const std::pair<std::string_view, E> (&table)[N], E value) {
    for (const auto& [name, v] : table) {
        if (v == value) return name;
    }
    return "?";
}

// The first entry for each value is its canonical name.
constexpr std::pair<std::string_view, Optimizer> kOptimizers[] = {
    {"adamw", Optimizer::AdamW},
    {"sgd", Optimizer::Sgd},
    {"sgd-momentum", Optimizer::SgdMomentum},
    {"sgd_momentum", Optimizer::SgdMomentum},
};
constexpr std::pair<std::string_view, Checkpointing> kCheckpointing[] = {
    {"none", Checkpointing::None},
    {"full", Checkpointing::Full},
    {"selective", Checkpointing::Selective},
};
constexpr std::pair<std::string_view, AttentionKernel> kAttention[] = {
    {"flash", AttentionKernel::Flash},
    {"eager", AttentionKernel::Eager},
    {"sdpa", AttentionKernel::Flash},
};
constexpr std::pair<std::string_view, KernelImpl> kKernels[] = {
    {"eager", KernelImpl::Eager},
    {"fused", KernelImpl::Fused},
};
constexpr std::pair<std::string_view, HfMask> kHfMask[] = {
    {"5.x", HfMask::V5},
    {"4.5x", HfMask::V4},
};
constexpr std::pair<std::string_view, Offload> kOffload[] = {
    {"none", Offload::None},
    {"cpu", Offload::Cpu},
};

}  // namespace

std::string_view optimizerName(Optimizer o) { return nameOf(kOptimizers, o); }
std::optional<Optimizer> parseOptimizer(std::string_view s) { return lookup(kOptimizers, s); }
std::string_view checkpointingName(Checkpointing c) { return nameOf(kCheckpointing, c); }
std::optional<Checkpointing> parseCheckpointing(std::string_view s) { return lookup(kCheckpointing, s); }

std::optional<AcSpec> parseAcSpec(std::string_view s) {
    const auto colon = s.find(':');
    auto mode = parseCheckpointing(s.substr(0, colon));
    if (!mode) return std::nullopt;
    if (colon == std::string_view::npos) return AcSpec{*mode, 1};
    if (*mode != Checkpointing::Full) return std::nullopt;
    const std::string_view digits = s.substr(colon + 1);
    int every = 0;
    const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), every);
    if (ec != std::errc() || ptr != digits.data() + digits.size() || every < 1) return std::nullopt;
    return AcSpec{*mode, every};
}

std::string acString(Checkpointing mode, int every) {
    std::string out(checkpointingName(mode));
    if (mode == Checkpointing::Full && every > 1) {
        out.push_back(':');
        out.append(std::to_string(every));
    }
    return out;
}
std::string_view attentionName(AttentionKernel a) { return nameOf(kAttention, a); }
std::optional<AttentionKernel> parseAttention(std::string_view s) { return lookup(kAttention, s); }
std::string_view kernelImplName(KernelImpl k) { return nameOf(kKernels, k); }
std::optional<KernelImpl> parseKernelImpl(std::string_view s) { return lookup(kKernels, s); }
std::string_view offloadName(Offload o) { return nameOf(kOffload, o); }
std::optional<Offload> parseOffload(std::string_view s) { return lookup(kOffload, s); }
std::string_view hfMaskName(HfMask m) { return nameOf(kHfMask, m); }
std::optional<HfMask> parseHfMask(std::string_view s) { return lookup(kHfMask, s); }

int optimizerStatesPerParam(Optimizer o) {
    switch (o) {
        case Optimizer::AdamW: return 2;        // exp_avg, exp_avg_sq
        case Optimizer::Sgd: return 0;
        case Optimizer::SgdMomentum: return 1;  // momentum_buffer
    }
    return 0;
}

}  // namespace shardcast::core
