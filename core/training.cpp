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
    {"layer", Checkpointing::Layer},
    {"op", Checkpointing::Op},
    {"attn-core", Checkpointing::AttnCore},
};
constexpr std::pair<std::string_view, AttentionKernel> kAttention[] = {
    {"flash", AttentionKernel::Flash},
    {"eager", AttentionKernel::Eager},
    {"sdpa", AttentionKernel::Flash},
};
constexpr std::pair<std::string_view, KernelImpl> kKernels[] = {
    {"eager", KernelImpl::Eager},
    {"fused", KernelImpl::Fused},
    {"compile", KernelImpl::Compile},
};
constexpr std::pair<std::string_view, ModelImpl> kImpls[] = {
    {"hf", ModelImpl::Hf},
    {"torchtitan", ModelImpl::Torchtitan},
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

std::optional<AcSpec> parseAcSpec(std::string_view s) {
    const auto colon = s.find(':');
    const std::string_view name = s.substr(0, colon);
    if (colon == std::string_view::npos) {
        auto mode = lookup(kCheckpointing, name);
        if (!mode || *mode == Checkpointing::Layer) return std::nullopt;  // layer needs its K
        return AcSpec{*mode, 1};
    }
    // "layer:K", and "full:K" as its alias (the spelling of earlier versions).
    if (!iequals(name, "layer") && !iequals(name, "full")) return std::nullopt;
    const std::string_view digits = s.substr(colon + 1);
    int every = 0;
    const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), every);
    if (ec != std::errc() || ptr != digits.data() + digits.size() || every < 1) return std::nullopt;
    if (every == 1) return AcSpec{Checkpointing::Full, 1};
    return AcSpec{Checkpointing::Layer, every};
}

std::string acSpecError(std::string_view s) {
    std::string out = "unknown activation checkpointing '" + std::string(s) + "'";
    if (iequals(s.substr(0, s.find(':')), "selective")) {
        out += " (ambiguous: torchtitan's \"selective\" is layer:K or op, Megatron's is attn-core)";
    } else if (iequals(s, "layer")) {
        out += " (layer needs its K: layer:2 checkpoints every second block)";
    }
    return out + "; valid: " + std::string(kAcChoices);
}

std::string acString(Checkpointing mode, int every) {
    std::string out(checkpointingName(mode));
    if (mode == Checkpointing::Layer) {
        out.push_back(':');
        out.append(std::to_string(every));
    }
    return out;
}

std::string acDescription(Checkpointing mode, int every, bool flash_attention) {
    switch (mode) {
        case Checkpointing::None: return "none (every block keeps its activations)";
        case Checkpointing::Full: return "full (every block checkpointed: keeps its input, recomputes its forward)";
        case Checkpointing::Layer: {
            const std::string k = std::to_string(every);
            return "torchtitan selective layer AC (option " + k + "): one block in " + k +
                   " fully checkpointed (blocks " + std::to_string(every - 1) + ", " + std::to_string(2 * every - 1) +
                   ", ...), the others keep everything";
        }
        case Checkpointing::Op:
            return "torchtitan selective op AC: every block keeps its mm outputs (all but every second mm) and "
                   "SDPA outputs, recomputes the rest";
        case Checkpointing::AttnCore:
            return flash_attention ? "Megatron attention-core recompute: a no-op with flash attention (no s^2 tensors "
                                     "are kept to drop)"
                                   : "Megatron attention-core recompute: the s^2 scores, softmax and dropout recomputed";
    }
    return "?";
}
std::string_view attentionName(AttentionKernel a) { return nameOf(kAttention, a); }
std::optional<AttentionKernel> parseAttention(std::string_view s) { return lookup(kAttention, s); }
std::string_view kernelImplName(KernelImpl k) { return nameOf(kKernels, k); }
std::optional<KernelImpl> parseKernelImpl(std::string_view s) { return lookup(kKernels, s); }
std::string_view offloadName(Offload o) { return nameOf(kOffload, o); }
std::optional<Offload> parseOffload(std::string_view s) { return lookup(kOffload, s); }
std::string_view hfMaskName(HfMask m) { return nameOf(kHfMask, m); }
std::optional<HfMask> parseHfMask(std::string_view s) { return lookup(kHfMask, s); }
std::string_view modelImplName(ModelImpl m) { return nameOf(kImpls, m); }
std::optional<ModelImpl> parseModelImpl(std::string_view s) { return lookup(kImpls, s); }

int optimizerStatesPerParam(Optimizer o) {
    switch (o) {
        case Optimizer::AdamW: return 2;        // exp_avg, exp_avg_sq
        case Optimizer::Sgd: return 0;
        case Optimizer::SgdMomentum: return 1;  // momentum_buffer
    }
    return 0;
}

}  // namespace shardcast::core
