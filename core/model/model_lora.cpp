#include "core/model/model_lora.hpp"

#include <algorithm>
#include <limits>
#include <set>

namespace shardcast::core {

namespace {

std::string lastPart(const std::string& name) {
    const size_t dot = name.rfind('.');
    return dot == std::string::npos ? name : name.substr(dot + 1);
}

bool isAttentionName(const std::string& name) {
    return name.find("attn") != std::string::npos || name.find("attention") != std::string::npos;
}

}  // namespace

Result<std::vector<int32_t>> loraTargetModules(const Model& model, const std::vector<std::string>& targets,
                                               const std::string& where) {
    const std::vector<int32_t> op_of = linearOpOfModule(model);
    std::vector<int32_t> linear;
    for (size_t m = 0; m < model.modules.size(); ++m) {
        if (op_of[m] >= 0) linear.push_back(static_cast<int32_t>(m));
    }
    auto validNames = [&] {
        std::set<std::string> names;
        for (int32_t m : linear) names.insert(lastPart(model.modules[static_cast<size_t>(m)].name));
        std::string out;
        for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
        return out.empty() ? std::string("none: the model runs no linear layer") : out;
    };
    std::vector<int32_t> chosen;
    if (targets.empty()) {
        for (int32_t m : linear) {
            const Module& mod = model.modules[static_cast<size_t>(m)];
            if (mod.parent > 0 && isAttentionName(lastPart(model.modules[static_cast<size_t>(mod.parent)].name))) {
                chosen.push_back(m);
            }
        }
        if (chosen.empty()) {
            return makeError(where + ": " + model.name +
                             " has no attention projections to put adapters on by default; name the modules "
                             "(RANK:MODULES), some of: " + validNames());
        }
        return chosen;
    }
    std::vector<uint8_t> picked(model.modules.size(), 0);
    for (const std::string& t : targets) {
        bool any = false;
        for (int32_t m : linear) {
            const std::string& name = model.modules[static_cast<size_t>(m)].name;
            const bool match = name == t || (name.size() > t.size() && name.compare(name.size() - t.size(), t.size(), t) == 0 &&
                                              name[name.size() - t.size() - 1] == '.');
            if (match) {
                any = true;
                picked[static_cast<size_t>(m)] = 1;
            }
        }
        if (!any) {
            return makeError(where + ": target '" + t + "' matches no linear module of " + model.name +
                             "; linear modules: " + validNames());
        }
    }
    for (int32_t m : linear) {
        if (picked[static_cast<size_t>(m)]) chosen.push_back(m);
    }
    return chosen;
}

Model addLoraAdapters(const Model& base, int rank, const std::vector<int32_t>& modules) {
    Model m = base;
    const std::vector<int32_t> op_of = linearOpOfModule(base);
    struct Adapter {
        int32_t base_layer = -1, a = -1, b = -1;
    };
    std::vector<Adapter> adapter(base.modules.size());
    auto addModule = [&](std::string name, int32_t parent, bool container) {
        m.modules.push_back(Module{std::move(name), parent, container, false});
        return static_cast<int32_t>(m.modules.size() - 1);
    };
    for (int32_t mod : modules) {
        const std::string name = base.modules[static_cast<size_t>(mod)].name;
        Adapter& ad = adapter[static_cast<size_t>(mod)];
        ad.base_layer = addModule(name + ".base_layer", mod, false);
        ad.a = addModule(name + ".lora_A.default", addModule(name + ".lora_A", mod, true), false);
        ad.b = addModule(name + ".lora_B.default", addModule(name + ".lora_B", mod, true), false);
    }
    const auto r = static_cast<int64_t>(rank);

    // Parameters in named_parameters() order: the base layer's, then lora_A's and lora_B's.
    m.params.clear();
    for (size_t i = 0; i < base.params.size(); ++i) {
        Param p = base.params[i];
        const auto mod = static_cast<size_t>(p.module);
        const Adapter& ad = adapter[mod];
        if (ad.base_layer < 0) {
            m.params.push_back(std::move(p));
            continue;
        }
        const std::string& mname = base.modules[mod].name;
        p.name = mname + ".base_layer." + p.name.substr(mname.size() + (mname.empty() ? 0 : 1));
        p.module = ad.base_layer;
        m.params.push_back(std::move(p));
        const bool last_of_module = i + 1 == base.params.size() || base.params[i + 1].module != static_cast<int32_t>(mod);
        if (!last_of_module) continue;
        const Op& lin = base.ops[static_cast<size_t>(op_of[mod])];
        Param a;
        a.name = mname + ".lora_A.default.weight";
        a.shape = {r, lin.in_features};
        a.module = ad.a;
        a.lora = true;
        Param b;
        b.name = mname + ".lora_B.default.weight";
        b.shape = {lin.out_features, r};
        b.module = ad.b;
        b.lora = true;
        m.params.push_back(std::move(a));
        m.params.push_back(std::move(b));
    }

    // Ops: after each targeted linear, lora_A, lora_B and the scaled add.
    m.ops.clear();
    std::vector<size_t> new_index(base.ops.size());
    auto back = [](size_t from, size_t to) {
        const size_t d = from - to;
        return d > static_cast<size_t>(std::numeric_limits<int16_t>::max()) ? int16_t{0} : static_cast<int16_t>(d);
    };
    for (size_t i = 0; i < base.ops.size(); ++i) {
        Op op = base.ops[i];
        new_index[i] = m.ops.size();
        if (op.same_input_back > 0) op.same_input_back = back(new_index[i], new_index[i - static_cast<size_t>(op.same_input_back)]);
        const auto mod = static_cast<size_t>(op.module);
        const Adapter ad = op.kernel == KernelShape::Linear ? adapter[mod] : Adapter{};
        if (ad.base_layer >= 0) op.module = ad.base_layer;
        const size_t head = new_index[i] - static_cast<size_t>(op.same_input_back);
        m.ops.push_back(op);
        if (ad.base_layer < 0) continue;
        const double f = op.token_share;
        const auto out = static_cast<double>(op.out_features);
        auto linear = [&](const char* name, int32_t module, int64_t fan_in, int64_t fan_out, bool saves_input) -> Op& {
            Op o = linearOp(name, module, fan_in, fan_out, saves_input, f);
            o.attention_variants = op.attention_variants;
            o.kernel_variants = op.kernel_variants;
            m.ops.push_back(std::move(o));
            return m.ops.back();
        };
        // lora_A reads the base layer's input (saved once, by whichever needs it first).
        Op& a = linear("lora_A", ad.a, op.in_features, r, false);
        a.same_input_back = back(m.ops.size() - 1, head);
        // lora_B keeps lora_A's output for its weight gradient.
        linear("lora_B", ad.b, r, op.out_features, true);
        // `result + lora_B(..) * scaling`: a mul and an add; one [tokens, out] beyond the result
        // is alive at a time. Backward: the mul's grad * scaling.
        Op add;
        add.name = "lora_scale_add";
        add.module = static_cast<int32_t>(mod);
        add.kind = OpKind::Elementwise;
        add.attention_variants = op.attention_variants;
        add.kernel_variants = op.kernel_variants;
        add.flops.per_token = 2 * out * f;
        add.temp_act.per_token = out * f;
        add.io_act.per_token = 5 * out * f;
        add.fwd_kernels = 2;
        add.io_bwd_act.per_token = 2 * out * f;
        m.ops.push_back(std::move(add));
    }
    m.assignCostClasses();
    return m;
}

LoraSummary loraSummary(const Model& model) {
    LoraSummary out;
    std::vector<uint8_t> adapted(model.modules.size(), 0);
    for (const Param& p : model.params) {
        if (!p.lora) continue;
        out.adapter_params += p.numel();
        // lora_A's module is M.lora_A.default: its grandparent is the adapted module M.
        const Module& adapter = model.modules[static_cast<size_t>(p.module)];
        const int32_t dict = adapter.parent;
        if (dict <= 0 || lastPart(model.modules[static_cast<size_t>(dict)].name) != "lora_A") continue;
        adapted[static_cast<size_t>(model.modules[static_cast<size_t>(dict)].parent)] = 1;
    }
    for (size_t m = 0; m < model.modules.size(); ++m) {
        if (!adapted[m]) continue;
        out.adapted.push_back(model.modules[m].name);
        const std::string name = lastPart(model.modules[m].name);
        if (std::find(out.names.begin(), out.names.end(), name) == out.names.end()) out.names.push_back(name);
    }
    out.modules = static_cast<int64_t>(out.adapted.size());
    for (size_t m = 0; m < model.modules.size(); ++m) {
        const std::string name = lastPart(model.modules[m].name);
        if (!adapted[m] && std::find(out.names.begin(), out.names.end(), name) != out.names.end()) out.names_ambiguous = true;
    }
    return out;
}

}  // namespace shardcast::core
