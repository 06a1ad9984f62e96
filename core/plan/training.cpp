#include "core/plan/training.hpp"

#include <charconv>

#include <algorithm>
#include <cctype>
#include <utility>

#include "core/base/json_text.hpp"

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
    {"adamw-fused", Optimizer::AdamWFused},
    {"adamw_fused", Optimizer::AdamWFused},
};
constexpr std::pair<std::string_view, Checkpointing> kCheckpointing[] = {
    {"none", Checkpointing::None},
    {"full", Checkpointing::Full},
    {"layer", Checkpointing::Layer},
    {"op", Checkpointing::Op},
    {"attn-core", Checkpointing::AttnCore},
    {"blocks", Checkpointing::Blocks},
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
constexpr std::pair<std::string_view, CheckpointMode> kCheckpointModes[] = {
    {"none", CheckpointMode::None},
    {"full", CheckpointMode::Full},
    {"sharded", CheckpointMode::Sharded},
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

namespace {

// A count of blocks in a "blocks:" run: at most this many (far above any model's block count, and
// a sum of 2^20 of them stays inside int64).
constexpr int64_t kMaxRunBlocks = 1'000'000;

// "blocks:MODE*N,...": the runs, adjacent runs of one mode merged, or why the text is not one.
std::optional<std::vector<AcRun>> parseAcRuns(std::string_view list, std::string* why) {
    auto fail = [&](std::string reason) -> std::optional<std::vector<AcRun>> {
        if (why) *why = std::move(reason);
        return std::nullopt;
    };
    if (list.empty()) return fail("blocks: needs at least one run MODE*N (e.g. blocks:full*8,none*24)");
    std::vector<AcRun> runs;
    size_t start = 0;
    while (start <= list.size()) {
        size_t comma = list.find(',', start);
        if (comma == std::string_view::npos) comma = list.size();
        const std::string_view item = list.substr(start, comma - start);
        const size_t star = item.find('*');
        if (item.empty() || star == std::string_view::npos) {
            return fail("run '" + textExcerpt(item) + "' is not MODE*N (e.g. full*8)");
        }
        const std::string_view mode_name = item.substr(0, star), digits = item.substr(star + 1);
        const auto mode = lookup(kCheckpointing, mode_name);
        if (!mode || (*mode != Checkpointing::None && *mode != Checkpointing::Op && *mode != Checkpointing::Full)) {
            return fail("run '" + textExcerpt(item) + "': a block's mode is none, op or full (got '" +
                        textExcerpt(mode_name) + "')");
        }
        int64_t count = 0;
        const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), count);
        if (digits.empty() || ec != std::errc() || ptr != digits.data() + digits.size() || count < 1 ||
            count > kMaxRunBlocks) {
            return fail("run '" + textExcerpt(item) + "': the count must be an integer from 1 to " +
                        std::to_string(kMaxRunBlocks));
        }
        if (!runs.empty() && runs.back().mode == *mode) {
            runs.back().blocks += count;
        } else {
            runs.push_back(AcRun{*mode, count});
        }
        start = comma + 1;
    }
    return runs;
}

bool startsWithBlocks(std::string_view s) { return s.size() >= 7 && iequals(s.substr(0, 7), "blocks:"); }

}  // namespace

std::optional<AcSpec> parseAcSpec(std::string_view s) {
    if (startsWithBlocks(s)) {
        auto runs = parseAcRuns(s.substr(7), nullptr);
        if (!runs) return std::nullopt;
        return AcSpec{Checkpointing::Blocks, 1, std::move(*runs)};
    }
    const auto colon = s.find(':');
    const std::string_view name = s.substr(0, colon);
    if (colon == std::string_view::npos) {
        auto mode = lookup(kCheckpointing, name);
        // layer needs its K, blocks its runs
        if (!mode || *mode == Checkpointing::Layer || *mode == Checkpointing::Blocks) return std::nullopt;
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
    std::string out = "unknown activation checkpointing '" + textExcerpt(s) + "'";
    std::string why;
    if (startsWithBlocks(s) && !parseAcRuns(s.substr(7), &why)) {
        out += " (" + why + ")";
    } else if (iequals(s, "blocks")) {
        out += " (blocks needs its runs: blocks:full*8,none*24 checkpoints the first 8 of 32 blocks)";
    } else if (iequals(s.substr(0, s.find(':')), "selective")) {
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

std::string acString(const AcSpec& ac) {
    if (ac.mode != Checkpointing::Blocks) return acString(ac.mode, ac.every);
    std::string out = "blocks:";
    for (size_t i = 0; i < ac.runs.size(); ++i) {
        if (i > 0) out.push_back(',');
        out.append(checkpointingName(ac.runs[i].mode));
        out.push_back('*');
        out.append(std::to_string(ac.runs[i].blocks));
    }
    return out;
}

std::string acDescription(const AcSpec& ac, bool flash_attention) {
    if (ac.mode != Checkpointing::Blocks) return acDescription(ac.mode, ac.every, flash_attention);
    std::string out = "per block:";
    int64_t first = 0;
    for (size_t i = 0; i < ac.runs.size(); ++i) {
        const int64_t last = first + ac.runs[i].blocks - 1;
        out += i == 0 ? " " : ", ";
        out.append(checkpointingName(ac.runs[i].mode));
        out += last == first ? (i == 0 ? " on block " : " on ") + std::to_string(first)
                             : (i == 0 ? " on blocks " : " on ") + std::to_string(first) + "-" + std::to_string(last);
        first = last + 1;
    }
    return out + " (full: keeps its input, recomputes its forward; op: torchtitan per-op SAC)";
}

std::optional<std::string> resolveAcBlocks(AcSpec& ac, int64_t block_count, std::string_view field) {
    if (ac.mode != Checkpointing::Blocks) return std::nullopt;
    int64_t total = 0;
    for (const AcRun& r : ac.runs) total += r.blocks;  // each <= kMaxRunBlocks: no overflow
    if (ac.runs.empty() || total != block_count) {
        return std::string(field) + ": '" + textExcerpt(acString(ac)) + "' covers " + std::to_string(total) +
               " blocks but the model has " + std::to_string(block_count) +
               "; the counts of blocks:MODE*N,... must sum to " + std::to_string(block_count);
    }
    if (ac.runs.size() == 1) ac = AcSpec{ac.runs.front().mode, 1, {}};
    return std::nullopt;
}

std::vector<std::string> joinAcListItems(const std::vector<std::string>& items) {
    std::vector<std::string> out;
    for (const std::string& item : items) {
        const bool continues = !out.empty() && startsWithBlocks(out.back()) && item.find('*') != std::string::npos &&
                               item.find(':') == std::string::npos;
        if (continues) {
            out.back() += "," + item;
        } else {
            out.push_back(item);
        }
    }
    return out;
}

Checkpointing blockAcMode(const std::vector<AcRun>& runs, int64_t block_index) {
    for (const AcRun& r : runs) {
        if (block_index < r.blocks) return r.mode;
        block_index -= r.blocks;
    }
    return Checkpointing::None;
}

Checkpointing blockCheckpointing(const TrainingSpec& t, int64_t block_index) {
    if (t.ac == Checkpointing::Blocks) return blockAcMode(t.ac_blocks, block_index);
    if (t.ac == Checkpointing::Layer) return layerAcCheckpoints(block_index, t.ac_every) ? Checkpointing::Full : Checkpointing::None;
    return t.ac;
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
        case Checkpointing::Blocks: return "per block";
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
std::string_view checkpointModeName(CheckpointMode m) { return nameOf(kCheckpointModes, m); }
std::optional<CheckpointMode> parseCheckpointMode(std::string_view s) { return lookup(kCheckpointModes, s); }
std::optional<HfMask> parseHfMask(std::string_view s) { return lookup(kHfMask, s); }
constexpr std::pair<std::string_view, AllGatherDtype> kAllGatherDtype[] = {{"param", AllGatherDtype::Param},
                                                                         {"fp8", AllGatherDtype::Fp8}};
std::string_view allGatherDtypeName(AllGatherDtype d) { return nameOf(kAllGatherDtype, d); }
std::optional<AllGatherDtype> parseAllGatherDtype(std::string_view s) { return lookup(kAllGatherDtype, s); }
std::string_view modelImplName(ModelImpl m) { return nameOf(kImpls, m); }
std::optional<ModelImpl> parseModelImpl(std::string_view s) { return lookup(kImpls, s); }

Result<LoraSpec> parseLora(std::string_view text, std::string_view where) {
    auto bad = [&](std::string_view why) {
        return makeError(std::string(where) + ": expected RANK or RANK:MODULE[,MODULE...] (a rank from 0 to " +
                         std::to_string(kMaxLoraRank) + ", module names as PEFT's target_modules), " + std::string(why) +
                         " (got '" + textExcerpt(text) + "')");
    };
    const size_t colon = text.find(':');
    const std::string_view rank_text = text.substr(0, colon);
    LoraSpec out;
    const auto [end, ec] = std::from_chars(rank_text.data(), rank_text.data() + rank_text.size(), out.rank);
    if (rank_text.empty() || ec != std::errc{} || end != rank_text.data() + rank_text.size() || out.rank < 0 ||
        out.rank > kMaxLoraRank) {
        return bad("the rank is not such a number");
    }
    if (colon == std::string_view::npos) return out;
    if (out.rank == 0) return bad("rank 0 (no LoRA) takes no modules");
    std::string_view rest = text.substr(colon + 1);
    while (true) {
        const size_t comma = rest.find(',');
        const std::string_view name = rest.substr(0, comma);
        const bool ok = !name.empty() && std::all_of(name.begin(), name.end(), [](unsigned char c) {
            return std::isalnum(c) || c == '_' || c == '.';
        });
        if (!ok) return bad("a module name is empty or has a character other than letters, digits, '_' and '.'");
        if (std::find(out.targets.begin(), out.targets.end(), name) == out.targets.end()) out.targets.emplace_back(name);
        if (comma == std::string_view::npos) break;
        rest = rest.substr(comma + 1);
    }
    return out;
}

std::string loraString(const LoraSpec& lora) {
    std::string s = std::to_string(lora.rank);
    for (size_t i = 0; i < lora.targets.size(); ++i) s += (i == 0 ? ":" : ",") + lora.targets[i];
    return s;
}

int optimizerStatesPerParam(Optimizer o) {
    switch (o) {
        case Optimizer::AdamW:
        case Optimizer::AdamWFused: return 2;   // exp_avg, exp_avg_sq
        case Optimizer::Sgd: return 0;
        case Optimizer::SgdMomentum: return 1;  // momentum_buffer
    }
    return 0;
}

}  // namespace shardcast::core
