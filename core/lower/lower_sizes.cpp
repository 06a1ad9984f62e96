// Units and their sizes (DESIGN.md section 3): the program order of the units, which parameters
// are frozen, and per unit what every rank stores and gathers (rules 1-3), the gradient and
// optimizer-state sizes (rule 9), FSDP1's FlatParameter, and reshard_after_forward (rule 5).
#include <algorithm>
#include <map>
#include <regex>
#include <tuple>
#include <utility>

#include "core/lower/lower_internal.hpp"

namespace shardcast::core::detail {
namespace {

// FSDP1 with use_orig_params=True starts each parameter 16-byte aligned in its FlatParameter.
constexpr int64_t kFlatParamAlignBytes = 16;

}  // namespace

// Units in program order: by their first forward op, parents before children; units that run no
// op go last. Also selects the ops that exist under the plan's attention kernel and kernel
// implementation, and each unit's forward op range.
void Lowering::orderUnits() {
    const auto n_units = m_s.ua.units.size();
    const auto n_mod = m_model.modules.size();

    const uint8_t attn_bit = m_tr.attention == AttentionKernel::Flash ? variant::kFlash : variant::kEagerAttn;
    const uint8_t kern_bit = m_tr.kernels == KernelImpl::Eager ? variant::kEagerKernels : variant::kFusedKernels;
    // torchtitan's Llama runs nn.RMSNorm, PyTorch's fused rms_norm kernel, even in eager mode.
    const uint8_t norm_bit = m_tr.impl == ModelImpl::Torchtitan ? variant::kFusedKernels : kern_bit;
    auto& first_of_module = m_s.first_op_of_module;
    auto& last_of_module = m_s.last_op_of_module;
    const std::array<uint8_t, 3> bits{attn_bit, kern_bit, norm_bit};
    if (m_s.active_model != m_plan.model || m_s.active_bits != bits || m_s.active_tp != m_tp) {
        m_s.active_model = m_plan.model;
        m_s.active_bits = bits;
        m_s.active_tp = static_cast<int>(m_tp);
        m_s.active.clear();
        for (size_t i = 0; i < m_model.ops.size(); ++i) {
            const Op& op = m_model.ops[i];
            if (op.existsUnder(attn_bit, op.kind == OpKind::Norm ? norm_bit : kern_bit)) m_s.active.push_back(static_cast<int32_t>(i));
        }

        // First and last forward op inside each module's subtree (children follow parents, so a
        // reverse sweep folds each module into its parent). The last one produces the module's
        // gradients in backward.
        first_of_module.assign(n_mod, INT_MAX);
        last_of_module.assign(n_mod, -1);
        for (int32_t i : m_s.active) {
            const int32_t m = m_model.ops[static_cast<size_t>(i)].module;
            if (first_of_module[m] == INT_MAX) first_of_module[m] = i;
            last_of_module[m] = i;
        }
        for (size_t m = n_mod - 1; m > 0; --m) {
            const int32_t parent = m_model.modules[m].parent;
            first_of_module[parent] = std::min(first_of_module[parent], first_of_module[m]);
            last_of_module[parent] = std::max(last_of_module[parent], last_of_module[m]);
        }
        activeOpTables();
    }
    // Unit forward ranges: the first and last op inside the unit's modules.
    auto& unit_first = m_s.unit_first_op;
    m_s.depth.assign(n_units, 0);
    unit_first.assign(n_units, INT_MAX);
    m_s.order.resize(n_units);
    m_s.unit_last_op.assign(n_units, -1);
    for (size_t u = 0; u < n_units; ++u) {
        for (int32_t m : m_s.ua.units[u].modules) {
            unit_first[u] = std::min<int64_t>(unit_first[u], first_of_module[m]);
            m_s.unit_last_op[u] = std::max(m_s.unit_last_op[u], last_of_module[m]);
        }
        m_s.order[u] = static_cast<int32_t>(u);
        for (int32_t a = m_s.ua.parent_unit[u]; a >= 0; a = m_s.ua.parent_unit[a]) ++m_s.depth[u];
    }
    auto before = [&](int32_t a, int32_t b) {
        if (unit_first[a] != unit_first[b]) return unit_first[a] < unit_first[b];
        return m_s.depth[a] < m_s.depth[b];
    };
    // Units are usually created in forward order (the root, then blocks in order): then there is
    // nothing to sort, and std::stable_sort would still allocate its buffer.
    if (!std::is_sorted(m_s.order.begin(), m_s.order.end(), before)) {
        std::stable_sort(m_s.order.begin(), m_s.order.end(), before);
    }
    m_s.pidx.assign(n_units, 0);
    for (size_t i = 0; i < n_units; ++i) m_s.pidx[m_s.order[i]] = static_cast<int32_t>(i);
    m_s.parent.assign(n_units, -1);
    m_s.us.assign(n_units, UnitSizes{});
    m_s.st.assign(n_units, UnitState{});
    for (size_t u = 0; u < n_units; ++u) {
        const int32_t pu = m_s.pidx[u];
        m_s.parent[pu] = m_s.ua.parent_unit[u] >= 0 ? m_s.pidx[m_s.ua.parent_unit[u]] : -1;
        m_s.us[pu].first_op = unit_first[u];
        m_s.us[pu].last_op = m_s.unit_last_op[u];
    }
}

// The tables kept with the active ops (LowerScratch::active_model).
void Lowering::activeOpTables() {
    const auto n_mod = m_model.modules.size();
    auto& block_of = m_s.block_of;
    block_of.assign(n_mod, -1);
    m_s.block_index.assign(n_mod, 0);
    for (size_t b = 0; b < m_model.blocks.size(); ++b) m_s.block_index[static_cast<size_t>(m_model.blocks[b])] = static_cast<int32_t>(b);
    for (size_t m = 1; m < n_mod; ++m) {
        block_of[m] = m_model.modules[m].is_block ? static_cast<int32_t>(m) : block_of[m_model.modules[m].parent];
    }
    m_s.block_runs.clear();
    m_s.active_module.resize(m_s.active.size());
    m_s.active_block.resize(m_s.active.size());
    m_s.active_class.resize(m_s.active.size());
    for (size_t ai = 0; ai < m_s.active.size(); ++ai) {
        const Op& op = m_model.ops[static_cast<size_t>(m_s.active[ai])];
        m_s.active_module[ai] = op.module;
        m_s.active_block[ai] = block_of[static_cast<size_t>(op.module)];
        m_s.active_class[ai] = op.cost_class;
        const int32_t block = m_s.active_block[ai];
        if (ai == 0 || block != m_s.active_block[ai - 1] || (block < 0 && op.module != m_s.active_module[ai - 1])) {
            m_s.block_runs.push_back(static_cast<int32_t>(ai));
        }
    }
    m_s.block_runs.push_back(static_cast<int32_t>(m_s.active.size()));
    // A parameter gets a gradient when some op runs inside its module (or, for a parameter owned
    // by a module without ops, inside the nearest ancestor that has one): the last such op's
    // backward makes it.
    const auto n_params = m_model.params.size();
    m_s.param_shapes.resize(n_params);
    m_s.param_grad_op.resize(n_params);
    m_s.op_weight_elems.assign(m_model.ops.size(), 0);
    const std::vector<uint8_t> float8 = float8Weights(m_model);
    m_s.module_float8.assign(n_mod, 0);
    for (size_t i = 0; i < n_params; ++i) {
        const Param& prm = m_model.params[i];
        ParamShape& ps = m_s.param_shapes[i];
        ps.module = prm.module;
        ps.dtype = prm.dtype;
        ps.float8 = float8[i] != 0;
        if (ps.float8) m_s.module_float8[static_cast<size_t>(prm.module)] = 1;
        ps.numel = prm.numel();
        ps.dim0 = prm.dim0();
        ps.row = prm.rowNumel();
        if (m_tp > 1 && prm.tp_dim == 0) {
            // TP1: the TP-local shard, which fully_shard shards again over the dp ranks.
            ps.dim0 = ceilDiv(ps.dim0, m_tp);
            ps.numel = ps.dim0 * ps.row;
        } else if (m_tp > 1 && prm.tp_dim == 1 && prm.shape.size() == 2) {
            ps.row = ceilDiv(ps.row, m_tp);
            ps.numel = ps.dim0 * ps.row;
        }
        int32_t grad_op_module = prm.module;
        while (grad_op_module >= 0 && m_s.last_op_of_module[grad_op_module] < 0) {
            grad_op_module = m_model.modules[grad_op_module].parent;
        }
        const int32_t grad_op = grad_op_module >= 0 ? m_s.last_op_of_module[grad_op_module] : -1;
        m_s.param_grad_op[i] = grad_op;
        if (grad_op >= 0) m_s.op_weight_elems[static_cast<size_t>(grad_op)] += ps.numel;
    }
    m_s.param_signature.resize(n_params);
    std::map<std::tuple<int64_t, int64_t, int, bool, bool>, int32_t> shapes;
    for (size_t i = 0; i < n_params; ++i) {
        const ParamShape& ps = m_s.param_shapes[i];
        const int dtype = ps.dtype ? static_cast<int>(*ps.dtype) : -1;
        m_s.param_signature[i] =
            shapes.try_emplace({ps.dim0, ps.row, dtype, m_s.param_grad_op[i] >= 0, ps.float8}, static_cast<int32_t>(shapes.size()))
                .first->second;
    }
    m_s.active_signature.resize(m_s.active.size());
    std::map<std::pair<int32_t, int64_t>, int32_t> signatures;
    for (size_t ai = 0; ai < m_s.active.size(); ++ai) {
        const int32_t cls = m_s.active_class[ai];
        const int64_t weights = m_s.op_weight_elems[static_cast<size_t>(m_s.active[ai])];
        m_s.active_signature[ai] = cls < 0 ? -1 - static_cast<int32_t>(ai)  // unique: equal to no other op
                                           : signatures.try_emplace({cls, weights}, static_cast<int32_t>(signatures.size())).first->second;
    }
    m_s.grads_all_trainable = false;
}

// Frozen parameters (LoRA-style): no gradient, no optimizer state, still gathered.
Status Lowering::findFrozenParams() {
    auto& frozen = m_s.frozen;
    frozen.assign(m_model.params.size(), 0);
    if (m_tr.lora.enabled()) {
        // LoRA: the adapters train, everything else is frozen (PEFT's mark_only_lora_as_trainable).
        for (size_t i = 0; i < m_model.params.size(); ++i) frozen[i] = m_model.params[i].lora ? 0 : 1;
        return Ok{};
    }
    if (m_tr.frozen_regex.empty()) return Ok{};
    std::regex re;
    try {
        re = std::regex(m_tr.frozen_regex, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
        return makeError("training.frozen: '" + m_tr.frozen_regex + "' is not a valid regular expression (" + e.what() + ")");
    }
    for (size_t i = 0; i < m_model.params.size(); ++i) {
        frozen[i] = std::regex_search(m_model.params[i].name, re) ? 1 : 0;
    }
    return Ok{};
}

// Per-unit sizes, parameter by parameter (rules 1-3 and 9), and which ops produce which
// gradients (which weights they read is kept with the active ops: activeOpTables).
void Lowering::unitSizes() {
    const auto n_units = m_s.ua.units.size();
    const auto n_params = m_s.param_shapes.size();
    const bool any_frozen = !m_tr.frozen_regex.empty() || m_tr.lora.enabled();
    const bool fsdp2 = m_sharded && !m_fsdp1;
    if (m_sharded && m_fsdp1) {
        m_s.fsdp1_flat.assign(n_units, 0);
        m_s.fsdp1_trainable.assign(n_units, 0);
    }
    m_s.param_unit.resize(n_params);
    if (fsdp2) m_s.param_unsharded_bytes.resize(n_params);
    if (any_frozen) {
        m_s.module_params.assign(m_model.modules.size(), 0);
        m_s.module_trainable.assign(m_model.modules.size(), 0);
        m_s.op_grad_elems.assign(m_model.ops.size(), 0);
        m_s.grads_all_trainable = false;
    } else if (!m_s.grads_all_trainable) {
        // Every parameter with a gradient is trainable: each op makes the gradients of the weights it reads.
        m_s.op_grad_elems = m_s.op_weight_elems;
        m_s.grads_all_trainable = true;
    }
    // A unit's parameters mostly come one after another: each run of them is summed in a local
    // (held in registers, not re-read from memory at every parameter) and added to the unit. A
    // run of the same parameter shapes as the run before (the next identical block) has the same
    // sizes, unless parameters are frozen (by name) or FSDP1 packs them into one FlatParameter.
    const bool copy_runs = !any_frozen && !(m_sharded && m_fsdp1);
    UnitSizes prev;  // the previous run's sums
    size_t prev_begin = 0, prev_len = 0;
    for (size_t i = 0; i < n_params;) {
        const int32_t pu = m_s.pidx[m_s.ua.module_unit[m_s.param_shapes[i].module]];
        size_t end = i;
        do {
            m_s.param_unit[end++] = pu;
        } while (end < n_params && m_s.pidx[m_s.ua.module_unit[m_s.param_shapes[end].module]] == pu);
        UnitSizes us;
        const bool same = copy_runs && end - i == prev_len &&
                          std::equal(m_s.param_signature.begin() + static_cast<std::ptrdiff_t>(i),
                                     m_s.param_signature.begin() + static_cast<std::ptrdiff_t>(end),
                                     m_s.param_signature.begin() + static_cast<std::ptrdiff_t>(prev_begin));
        if (same) {
            us = prev;
            if (fsdp2) {
                std::copy_n(m_s.param_unsharded_bytes.begin() + static_cast<std::ptrdiff_t>(prev_begin), end - i,
                            m_s.param_unsharded_bytes.begin() + static_cast<std::ptrdiff_t>(i));
            }
        } else {
            for (size_t k = i; k < end; ++k) {
                const ParamShape& prm = m_s.param_shapes[k];
                const int64_t numel = prm.numel;
                const int32_t grad_op = m_s.param_grad_op[k];
                const bool trainable = grad_op >= 0 && !(any_frozen && m_s.frozen[k]);
                us.params += numel;
                if (trainable) {
                    us.trainable += numel;
                    us.grad_elems += numel;
                }
                if (any_frozen) {
                    m_s.module_params[prm.module] += numel;
                    if (trainable) {
                        m_s.module_trainable[prm.module] += numel;
                        m_s.op_grad_elems[static_cast<size_t>(grad_op)] += numel;
                    }
                }
                if (!m_sharded) {
                    addParamNoShard(us, prm, trainable);
                } else if (fsdp2) {
                    m_s.param_unsharded_bytes[k] = addParamFsdp2(us, prm, trainable);
                } else {
                    addParamToFlatParameter(pu, prm, trainable);
                }
            }
        }
        UnitSizes& to = m_s.us[static_cast<size_t>(pu)];
        to.params += us.params;
        to.trainable += us.trainable;
        to.grad_elems += us.grad_elems;
        to.sharded_bytes += us.sharded_bytes;
        to.unsharded_bytes += us.unsharded_bytes;
        to.flat_bytes += us.flat_bytes;
        to.cast_bytes += us.cast_bytes;
        to.rs_input_elems += us.rs_input_elems;
        to.grad_shard_elems += us.grad_shard_elems;
        to.opt_elems += us.opt_elems;
        to.float8_shard_elems += us.float8_shard_elems;
        prev = us;
        prev_begin = i;
        prev_len = end - i;
        i = end;
    }
    if (m_sharded && m_fsdp1) fsdp1FlatParameterSizes();
    vocabGradExtra();
    unshardedParamTensors();
    m_s.any_frozen = any_frozen;
    m_s.op_grad.clear();
    for (int32_t b : m_model.blocks) ++m_s.us[m_s.pidx[m_s.ua.module_unit[b]]].blocks;
}

// NO_SHARD (and shard groups of one rank): every rank holds the whole parameter; mixed precision
// keeps a param_dtype copy while the unit runs.
void Lowering::addParamNoShard(UnitSizes& us, const ParamShape& prm, bool trainable) {
    const int64_t numel = prm.numel;
    us.sharded_bytes += numel * itemSize(prm.dtype.value_or(m_master));
    us.unsharded_bytes += m_mp ? numel * itemSize(m_pdt) : 0;
    if (trainable) {
        us.rs_input_elems += numel;
        us.grad_shard_elems += numel;
        us.opt_elems += numel;
    }
}

// FSDP2 rule 1: ceil(d0/W) rows per rank, padded on every rank; optimizer state on the unpadded
// rows. Rule 2: the flat all-gather output is W padded shards in param_dtype, with a cast
// temporary of the shard when param_dtype differs. Rule 3: unsharded parameters of the same size.
// Returns the bytes of the parameter's unsharded tensor.
int64_t Lowering::addParamFsdp2(UnitSizes& us, const ParamShape& prm, bool trainable) {
    const DType orig = prm.dtype.value_or(m_master);
    const int64_t row = prm.row;
    const int64_t d0 = prm.dim0;
    const int64_t rows = ceilDiv(d0, m_W);
    const int64_t padded_shard = rows * row;
    // Rule F8: a Float8Linear weight under fp8 all-gather: torchao's fsdp_pre_all_gather casts the
    // shard to float8 e4m3 with the precomputed scale and the all-gather moves those bytes (FSDP2
    // all-gathers mixed dtypes as one uint8 buffer); fsdp_post_all_gather wraps the gathered bytes as
    // the unsharded Float8 weight (torchao/float8/fsdp_utils.py, WeightWithDynamicFloat8CastTensor).
    const bool float8 = prm.float8 && m_tr.all_gather_dtype == AllGatherDtype::Fp8;
    const DType pdt = float8 ? DType::F8 : m_tr.param_dtype.value_or(orig);
    us.sharded_bytes += padded_shard * itemSize(orig);
    if (float8) us.float8_shard_elems += std::min(rows, d0) * row;
    const int64_t unsharded = m_W * padded_shard * itemSize(pdt);
    us.flat_bytes += unsharded;
    us.unsharded_bytes += unsharded;
    us.cast_bytes += pdt != orig ? padded_shard * itemSize(pdt) : 0;
    if (trainable) {
        us.rs_input_elems += m_W * padded_shard;
        us.grad_shard_elems += padded_shard;
        us.opt_elems += std::min(rows, d0) * row;
    }
    return unsharded;
}

// FSDP2's copy-out allocates each parameter's unsharded tensor on its own
// (FSDPParam.alloc_all_gather_outputs, then split_with_sizes_copy out of the flat all-gather
// output: torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py foreach_all_gather_copy_out),
// so the caching allocator sees one block per parameter, in registration order.
void Lowering::unshardedParamTensors() {
    if (!m_sharded || m_fsdp1) return;
    const auto n_units = m_s.us.size();
    const auto n_params = m_s.param_unit.size();
    auto& count = m_s.unit_tensor_count;
    count.assign(n_units, 0);
    // Counted and filled run by run of parameters of one unit (see unitSizes).
    for (size_t i = 0; i < n_params;) {
        const int32_t u = m_s.param_unit[i];
        size_t j = i + 1;
        while (j < n_params && m_s.param_unit[j] == u) ++j;
        count[static_cast<size_t>(u)] += static_cast<uint32_t>(j - i);
        i = j;
    }
    auto offset = static_cast<uint32_t>(m_p.tensor_bytes.size());
    for (size_t u = 0; u < n_units; ++u) {
        m_s.us[u].param_tensors = Span{offset, 0};
        offset += count[u];
    }
    m_p.tensor_bytes.resize(offset);
    for (size_t i = 0; i < n_params;) {
        const int32_t u = m_s.param_unit[i];
        Span& sp = m_s.us[static_cast<size_t>(u)].param_tensors;
        int64_t* out = m_p.tensor_bytes.data() + sp.offset + sp.count;
        int64_t* const first = out;
        for (; i < n_params && m_s.param_unit[i] == u; ++i) {
            const int64_t bytes = m_s.param_unsharded_bytes[i];  // addParamFsdp2
            if (bytes > 0) *out++ = bytes;
        }
        sp.count += static_cast<uint32_t>(out - first);
    }
}

// FSDP1: parameters are concatenated into one FlatParameter per unit, each starting aligned.
void Lowering::addParamToFlatParameter(int32_t unit, const ParamShape& prm, bool trainable) {
    const int64_t align = std::max<int64_t>(1, kFlatParamAlignBytes / itemSize(prm.dtype.value_or(m_master)));
    m_s.fsdp1_flat[unit] = ceilDiv(m_s.fsdp1_flat[unit], align) * align + prm.numel;
    if (trainable) m_s.fsdp1_trainable[unit] += prm.numel;
}

// FSDP1: the FlatParameter is padded to a multiple of W and split evenly; the all-gather writes
// straight into the unsharded FlatParameter (no separate flat output); mixed precision keeps a
// low-precision copy of the shard (_mp_shard) as the all-gather input.
void Lowering::fsdp1FlatParameterSizes() {
    for (size_t u = 0; u < m_s.us.size(); ++u) {
        UnitSizes& us = m_s.us[u];
        const int64_t total = ceilDiv(m_s.fsdp1_flat[u], m_W) * m_W;
        const int64_t shard = total / m_W;
        us.sharded_bytes = shard * itemSize(m_master);
        us.unsharded_bytes = total * itemSize(m_pdt);
        us.flat_bytes = 0;
        us.cast_bytes = m_mp ? shard * itemSize(m_pdt) : 0;
        if (m_s.fsdp1_trainable[u] > 0) {
            us.rs_input_elems = total;
            us.grad_shard_elems = shard;
            us.opt_elems = std::min(shard, m_s.fsdp1_trainable[u]);
        }
    }
}

// Rule 5: per strategy, overridable; the root never reshards after forward.
void Lowering::reshardAfterForwardPerUnit() {
    // PP1 (no reshard under pipeline parallelism by default) is part of reshardsAfterForward.
    const bool raf = reshardsAfterForward(m_sh);
    for (size_t u = 0; u < m_s.us.size(); ++u) m_s.us[u].reshard_after_forward = u == 0 ? false : raf;
}

// Each unit's buffers by phase and its collectives (core::UnitInfo). The schedule emits the unit's
// all-gather, its buffers and its reductions with these figures and the wrap search reads them, so
// each of these sizes is decided here only.
void Lowering::unitBufferTable(int32_t u, UnitInfo& info) const {
    const UnitSizes& us = m_s.us[static_cast<size_t>(u)];
    auto collective = [&](GroupKind kind, int64_t bytes) {
        const ProcessGroup& g = m_p.groups[static_cast<size_t>(m_group[static_cast<size_t>(kind)])];
        return UnitCollective{bytes, g.size, g.nodes};
    };
    const bool trainable = us.grad_elems > 0;
    const bool accumulates = (m_tr.no_sync || m_pp > 1) && m_tr.grad_accum > 1 && trainable;
    if (!gathers(u)) {
        // Whole parameters: mixed precision computes on a cast copy; gradients are all-reduced over
        // the world, through a reduce_dtype buffer unless they are already in the master dtype.
        const int64_t cast = m_mp ? us.unsharded_bytes : 0;
        info.unshard_wait_bytes = cast;
        info.unsharded_param_bytes = cast;
        if (trainable) {
            const bool via_buffer = m_mp || m_rdt != m_master;
            info.all_reduce = collective(GroupKind::World, via_buffer ? us.rs_input_elems * itemSize(m_rdt)
                                                                      : us.grad_shard_elems * itemSize(m_master));
        }
        if (accumulates && m_mp) info.no_sync_grad_bytes = us.grad_elems * itemSize(m_pdt);
        return;
    }
    // FSDP1 gathers into the unsharded FlatParameter; FSDP2 into a flat output split by the copy-out.
    const int64_t gathered = m_fsdp1 ? us.unsharded_bytes : us.flat_bytes;
    info.unshard_in_flight_bytes = gathered;
    info.unshard_wait_bytes = m_fsdp1 ? us.unsharded_bytes : us.flat_bytes + us.unsharded_bytes;
    info.unsharded_param_bytes = us.unsharded_bytes;
    info.all_gather = collective(GroupKind::Shard, gathered);
    if (us.reshard_after_forward) {
        const int k = postForwardK();
        info.all_gather_bwd = collective(k > 0 ? GroupKind::PostForward : GroupKind::Shard, gathered);
        info.post_forward_shard_bytes = k > 0 ? us.unsharded_bytes / k : 0;
    }
    if (trainable) {
        info.reduce_scatter_input_bytes = us.rs_input_elems * itemSize(m_rdt);
        info.reduce_scatter = collective(GroupKind::Shard, info.reduce_scatter_input_bytes);
        if (m_R > 1) info.all_reduce = collective(GroupKind::Replicate, us.grad_shard_elems * itemSize(m_rdt));
    }
    if (accumulates) {
        // FSDP2 upcasts held gradients to reduce_dtype; FSDP1 keeps them as autograd wrote them.
        info.no_sync_grad_bytes =
            (us.grad_elems + us.vocab_grad_extra) * itemSize(!m_fsdp1 && m_rdt != m_pdt ? m_rdt : m_pdt);
    }
}

}  // namespace shardcast::core::detail
