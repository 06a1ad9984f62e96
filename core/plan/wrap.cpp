#include "core/plan/wrap.hpp"

#include <algorithm>

namespace shardcast::core {
namespace {

std::string lastComponent(const std::string& fqn) {
    auto dot = fqn.rfind('.');
    return dot == std::string::npos ? fqn : fqn.substr(dot + 1);
}

// "model.layers.0..3" for a run of blocks; the module's own name for one.
std::string groupName(const Model& model, const std::vector<int32_t>& mods) {
    const std::string& first = model.modules[mods.front()].name;
    if (mods.size() == 1) return first;
    return first + ".." + lastComponent(model.modules[mods.back()].name);
}

}  // namespace

std::vector<std::string_view> splitUnitEntry(std::string_view entry) {
    std::vector<std::string_view> parts;
    size_t start = 0;
    for (;;) {
        const size_t plus = entry.find('+', start);
        parts.push_back(entry.substr(start, plus == std::string_view::npos ? std::string_view::npos : plus - start));
        if (plus == std::string_view::npos) return parts;
        start = plus + 1;
    }
}

Status resolveUnits(const Model& model, const WrapPolicy& wrap, UnitAssignment& out) {
    const auto n_modules = static_cast<int32_t>(model.modules.size());
    // The vectors of `out` keep their capacity (and the units' strings theirs) between calls.
    size_t n_units = 0;
    std::vector<int32_t>& own_unit = out.module_unit;  // reused as scratch until the end
    own_unit.assign(static_cast<size_t>(n_modules), -1);
    auto addUnit = [&](const int32_t* mods, size_t count) -> Status {
        for (size_t i = 0; i < count; ++i) {
            if (own_unit[mods[i]] >= 0) {
                return makeError("wrap: module '" + model.modules[mods[i]].name +
                                 "' is listed in more than one unit");
            }
        }
        for (size_t i = 0; i < count; ++i) own_unit[mods[i]] = static_cast<int32_t>(n_units);
        if (out.units.size() <= n_units) out.units.emplace_back();
        UnitSpec& unit = out.units[n_units++];
        unit.modules.assign(mods, mods + count);
        if (n_units == 1) {
            unit.name = "(root)";
        } else {
            unit.name = groupName(model, unit.modules);
        }
        return Ok{};
    };
    const int32_t root = 0;
    (void)addUnit(&root, 1);

    switch (wrap.kind) {
        case WrapKind::Whole:
            break;
        case WrapKind::Block:
        case WrapKind::EveryK: {
            if (model.blocks.empty()) {
                return makeError("wrap: model '" + model.name +
                                 "' has no transformer blocks; use wrap whole, min-params:N or modules:FILE");
            }
            const int64_t k = wrap.kind == WrapKind::Block ? 1 : wrap.k;
            if (k < 1) return makeError("wrap: every:K needs K >= 1 (got " + std::to_string(k) + ")");
            for (size_t i = 0; i < model.blocks.size(); i += static_cast<size_t>(k)) {
                const size_t end = std::min(model.blocks.size(), i + static_cast<size_t>(k));
                if (auto st = addUnit(model.blocks.data() + i, end - i); !st) return st;
            }
            break;
        }
        case WrapKind::MinParams: {
            if (wrap.min_params < 1) return makeError("wrap: min-params:N needs N >= 1");
            std::vector<int64_t> nonwrapped(n_modules, 0);
            for (const Param& p : model.params) nonwrapped[p.module] += p.numel();
            std::vector<int32_t> wrapped;
            // Parents precede children, so the reverse order visits children first (post-order).
            for (int32_t m = n_modules - 1; m > 0; --m) {
                const Module& mod = model.modules[m];
                if (!mod.is_container && nonwrapped[m] >= wrap.min_params) {
                    wrapped.push_back(m);
                } else {
                    nonwrapped[mod.parent] += nonwrapped[m];
                }
            }
            std::sort(wrapped.begin(), wrapped.end());
            for (int32_t m : wrapped) {
                if (auto st = addUnit(&m, 1); !st) return st;
            }
            break;
        }
        case WrapKind::Modules: {
            for (const std::string& entry : wrap.modules) {
                std::vector<int32_t> mods;
                for (const std::string_view fqn_view : splitUnitEntry(entry)) {
                    const std::string fqn(fqn_view);
                    const int32_t m = model.findModule(fqn);
                    if (m < 0) {
                        return makeError("wrap: module '" + fqn + "' (in " +
                                         (wrap.modules_file.empty() ? std::string("the module list")
                                                                    : wrap.modules_file) +
                                         ") is not a module of " + model.name);
                    }
                    if (m == 0) return makeError("wrap: the root module is always a unit; do not list it");
                    mods.push_back(m);
                }
                if (auto st = addUnit(mods.data(), mods.size()); !st) return st;
            }
            break;
        }
    }

    out.units.resize(n_units);
    // Parents precede children: a module without its own unit inherits its parent's.
    for (int32_t m = 1; m < n_modules; ++m) {
        if (own_unit[m] < 0) own_unit[m] = own_unit[model.modules[m].parent];
    }
    out.parent_unit.assign(out.units.size(), -1);
    for (size_t u = 1; u < out.units.size(); ++u) {
        const int32_t first = out.units[u].modules.front();
        out.parent_unit[u] = out.module_unit[model.modules[first].parent];
    }
    return Ok{};
}

}  // namespace shardcast::core
