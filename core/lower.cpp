#include "core/lower.hpp"

#include <algorithm>
#include <array>
#include <cassert>
#include <climits>
#include <regex>

#include "core/wrap.hpp"

namespace shardcast::core {
namespace {

// Per-unit sizes on the representative rank (rank 0: it holds the largest unpadded shards).
struct UnitSizes {
    int64_t params = 0, trainable = 0;
    int64_t sharded_bytes = 0;     // persistent shard, padded, original dtype
    int64_t unsharded_bytes = 0;   // unsharded parameters in param_dtype (padded)
    int64_t flat_bytes = 0;        // FSDP2 flat all-gather output (W x padded shard, param_dtype)
    int64_t cast_bytes = 0;        // copy-in cast temporary (FSDP2) / low-precision shard (FSDP1)
    int64_t grad_elems = 0;        // unsharded gradient elements (unpadded, trainable)
    int64_t rs_input_elems = 0;    // reduce-scatter input elements (padded, trainable, W ranks)
    int64_t grad_shard_elems = 0;  // reduce-scatter output elements per rank (padded)
    int64_t opt_elems = 0;         // unpadded trainable shard elements (optimizer state)
    int64_t first_op = INT_MAX, last_op = -1;
    int32_t blocks = 0;
    bool reshard_after_forward = true;
};

struct Segment {
    int32_t unit = 0;          // program unit index
    bool checkpointed = false; // full activation checkpointing of the enclosing block
    int64_t fwd_flops = 0, bwd_flops = 0, fwd_hbm = 0, bwd_hbm = 0;
    int64_t saved = 0;         // Activation bytes held after the forward
    int64_t saved_full = 0;    // what a recompute re-creates (checkpointed segments)
    int64_t fwd_peak_act = 0, fwd_peak_temp = 0;     // forward transient (no checkpointing)
    int64_t ckpt_peak_temp = 0;                      // forward transient under checkpointing
    int64_t bwd_peak_grad = 0, bwd_peak_temp = 0, bwd_peak_freed = 0;
    int64_t grad_bytes = 0;    // gradients (param_dtype) produced by this segment
    int64_t weight_bytes = 0;  // unsharded parameters (param_dtype) the segment's ops read
    int64_t op_begin = 0, op_end = 0;
};

enum class ItemKind : uint8_t { Pre, Seg, Post };
struct Item {
    ItemKind kind;
    int32_t index;  // unit (Pre/Post) or segment
};

struct UnitState {
    bool unsharded = false;     // unsharded parameters allocated
    bool ag_pending = false;    // all-gather issued, not yet waited for
    bool post_fwd_shard = false;
    bool acc_live = false;      // no_sync: gradients kept across micro-batches
    bool sharded_grad = false;  // sharded gradient exists (accumulate into it)
    int32_t ag_task = -1;
    int32_t copyout_task = -1;
    int64_t grads_live = 0;     // UnshardedGrad bytes held
    int64_t acc_bytes = 0;      // no_sync accumulated gradient bytes
};

int nodesOfRun(int64_t first, int64_t stride, int64_t count, int64_t gpus_per_node) {
    int nodes = 0;
    int64_t last = -1;
    for (int64_t i = 0; i < count; ++i) {
        const int64_t node = (first + i * stride) / gpus_per_node;
        if (node != last) {
            ++nodes;
            last = node;
        }
    }
    return nodes;
}

}  // namespace

// Scratch vectors of a lowering, kept between calls so that lowering many plans allocates little.
struct LowerScratch {
    UnitAssignment ua;
    std::vector<int32_t> pidx;           // UnitAssignment index -> program unit index
    std::vector<int32_t> order;          // program unit index -> UnitAssignment index
    std::vector<int32_t> parent;         // program unit -> enclosing program unit
    std::vector<UnitSizes> us;
    std::vector<UnitState> st;
    std::vector<Segment> segs;
    std::vector<Item> items;
    std::vector<int32_t> bwd_order, bwd_pos;
    std::vector<int32_t> active;         // active op indices, forward order
    std::vector<int64_t> op_grad_elems;  // per model op: gradient elements produced in its backward
    std::vector<int64_t> op_weight_elems;  // per model op: parameter elements its module reads
    std::vector<uint8_t> op_frozen;
    std::vector<MemEvent> host_pending;  // host-side frees applied at the next task's start
    std::vector<int32_t> free_queue;     // FSDP1 rate limiter: tasks whose end frees a unit
    // setup() temporaries
    std::vector<int32_t> last_op_of_module, depth, block_of, block_index, chain, unit_last_op;
    std::vector<int64_t> first_op_of_module, unit_first_op, module_params, module_trainable, fsdp1_flat,
        fsdp1_trainable;
    std::vector<uint8_t> frozen;
    struct OpCost {
        int64_t saved = 0, temp = 0, bwd_temp = 0, flops = 0, bwd_flops = 0, io = 0;
    };
    std::vector<OpCost> op_cost;         // per active op (index into active)
    std::vector<OpCost> class_cost;      // per Op::cost_class
    std::vector<uint8_t> class_done;
};

namespace {

class Lowering {
public:
    Lowering(const Plan& plan, const Mesh& mesh, Program& out, LowerScratch& scratch)
        : m_plan(plan), m_model(*plan.model), m_tr(plan.training), m_sh(plan.sharding), m_mesh(mesh), m_p(out),
          m_s(scratch) {
        m_s.host_pending.clear();
        m_s.free_queue.clear();
    }

    Status run() {
        m_p.clear();
        if (auto s = setup(); !s) return s;
        buildSegments();
        buildItems();
        fillProgramHeader();
        for (int mb = 0; mb < m_tr.grad_accum; ++mb) {
            forwardPass(mb);
            backwardPass(mb);
        }
        optimizerStep();
        return Ok{};
    }

private:
    const Plan& m_plan;
    const Model& m_model;
    const TrainingSpec& m_tr;
    const ShardingSpec& m_sh;
    Mesh m_mesh;
    Program& m_p;
    LowerScratch& m_s;

    int64_t m_W = 1, m_R = 1, m_tokens = 0, m_seq = 0;
    DType m_pdt = DType::BF16, m_rdt = DType::F32, m_master = DType::F32;
    bool m_fsdp1 = false, m_sharded = true, m_mp = false, m_offload = false, m_hybrid = false;
    int m_ag_nodes = 1, m_ag_count_nodes = 1, m_rep_nodes = 1, m_world_nodes = 1;

    // Emission state.
    enum class Phase : uint8_t { Start, Peak, End } m_phase = Phase::Start;
    int32_t m_saved_flat = -1;             // FSDP2: unit whose flat output is kept in all_gather_state
    int32_t m_ag_wait = -1;                // copy-out the all-gather streams wait on
    int64_t m_pending_rs = 0;              // reduce-scatter input awaiting the next reduce
    int32_t m_pending_compute_dep = -1;    // FSDP1: the compute stream waits on this all-gather
    std::array<int32_t, kStreamCount> m_last_on_stream{};
    // One NCCL communicator runs its collectives in issue order on one internal stream, so an
    // all-gather issued after a reduce-scatter on the same process group waits for it. This is
    // why FSDP needs backward prefetch: without it, unit i's all-gather queues behind unit i+1's
    // reduce-scatter, which waits for unit i+1's backward.
    enum Pg { kShardPg, kReplicatePg, kPostForwardPg, kWorldPg, kPgCount };
    std::array<int32_t, kPgCount> m_last_collective{};
    void collectiveOn(Pg pg) {
        dep(m_last_collective[pg]);
        m_last_collective[pg] = curId();
    }
    int32_t m_last_compute = -1;
    std::array<int32_t, 2> m_host_pending_deps{-1, -1};  // what the end-of-backward frees wait for

    int64_t actBytes() const { return itemSize(m_pdt); }

    // setup.
    Status setup() {
        m_W = m_mesh.shard_size;
        m_R = m_mesh.replicate_size;
        m_fsdp1 = m_sh.fsdp_version == 1;
        m_sharded = m_sh.strategy != Strategy::NoShard && m_W > 1;
        m_hybrid = isHybrid(m_sh.strategy) || (m_sh.strategy != Strategy::NoShard && m_R > 1);
        m_master = m_tr.master_dtype;
        m_pdt = m_tr.computeDtype();
        m_rdt = m_tr.reduceDtype();
        m_mp = m_pdt != m_master;
        m_offload = m_tr.offload == Offload::Cpu;
        m_tokens = m_tr.tokens();
        m_seq = m_tr.seq_len;
        m_last_on_stream.fill(-1);
        m_last_collective.fill(-1);
        const int64_t G = m_plan.cluster.gpus_per_node;
        for (int64_t g = 0; g < m_R; ++g) {
            m_ag_nodes = std::max(m_ag_nodes, nodesOfRun(g * m_W, 1, m_W, G));
        }
        const int k = m_sh.reshard_after_forward == ReshardMode::Count ? m_sh.reshard_after_forward_k : 1;
        m_ag_count_nodes = nodesOfRun(0, 1, std::max(k, 1), G);
        m_rep_nodes = nodesOfRun(0, m_W, m_R, G);
        m_world_nodes = m_plan.cluster.nodes;

        if (auto s = resolveUnits(m_model, m_sh.wrap, m_s.ua); !s) return s;
        const auto n_units = m_s.ua.units.size();
        const auto n_mod = m_model.modules.size();

        // Active ops (the attention kernel and kernel implementation select variants).
        const uint8_t attn_bit = m_tr.attention == AttentionKernel::Flash ? variant::kFlash : variant::kEagerAttn;
        const uint8_t kern_bit = m_tr.kernels == KernelImpl::Eager ? variant::kEagerKernels : variant::kFusedKernels;
        m_s.active.clear();
        for (size_t i = 0; i < m_model.ops.size(); ++i) {
            if (m_model.ops[i].existsUnder(attn_bit, kern_bit)) m_s.active.push_back(static_cast<int32_t>(i));
        }

        // First and last forward op inside each module's subtree (children follow parents, so a
        // reverse sweep folds each module into its parent). The last one produces the module's
        // gradients in backward.
        auto& first_of_module = m_s.first_op_of_module;
        auto& last_of_module = m_s.last_op_of_module;
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
        // Program order: by first op, parents before children; units that run no op go last.
        std::stable_sort(m_s.order.begin(), m_s.order.end(), [&](int32_t a, int32_t b) {
            if (unit_first[a] != unit_first[b]) return unit_first[a] < unit_first[b];
            return m_s.depth[a] < m_s.depth[b];
        });
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
        const auto& last_op_of_module = last_of_module;

        // Frozen parameters (LoRA-style): no gradient, no optimizer state, still gathered.
        auto& frozen = m_s.frozen;
        frozen.assign(m_model.params.size(), 0);
        if (!m_tr.frozen_regex.empty()) {
            std::regex re;
            try {
                re = std::regex(m_tr.frozen_regex, std::regex::ECMAScript);
            } catch (const std::regex_error& e) {
                return makeError("training.frozen: '" + m_tr.frozen_regex + "' is not a valid regular expression (" + e.what() + ")");
            }
            for (size_t i = 0; i < m_model.params.size(); ++i) {
                frozen[i] = std::regex_search(m_model.params[i].name, re) ? 1 : 0;
            }
        }

        // Sizes per unit (DESIGN.md section 3, rules 1-3; FSDP1: one FlatParameter per unit).
        auto& module_params = m_s.module_params;
        auto& module_trainable = m_s.module_trainable;
        auto& fsdp1_flat = m_s.fsdp1_flat;
        auto& fsdp1_trainable = m_s.fsdp1_trainable;
        module_params.assign(n_mod, 0);
        module_trainable.assign(n_mod, 0);
        fsdp1_flat.assign(n_units, 0);
        fsdp1_trainable.assign(n_units, 0);
        m_s.op_grad_elems.assign(m_model.ops.size(), 0);
        m_s.op_weight_elems.assign(m_model.ops.size(), 0);
        for (size_t i = 0; i < m_model.params.size(); ++i) {
            const Param& prm = m_model.params[i];
            UnitSizes& us = m_s.us[m_s.pidx[m_s.ua.module_unit[prm.module]]];
            const DType orig = prm.dtype.value_or(m_master);
            const int64_t numel = prm.numel();
            const int64_t row = prm.rowNumel();
            const int64_t d0 = prm.dim0();
            // A parameter gets a gradient when some op runs inside its module (or, for a
            // parameter owned by a module without ops, inside the nearest ancestor that has one).
            int32_t grad_op_module = prm.module;
            while (grad_op_module >= 0 && last_op_of_module[grad_op_module] < 0) {
                grad_op_module = m_model.modules[grad_op_module].parent;
            }
            const bool trainable = !frozen[i] && grad_op_module >= 0;
            if (grad_op_module >= 0) m_s.op_weight_elems[static_cast<size_t>(last_op_of_module[grad_op_module])] += numel;
            module_params[prm.module] += numel;
            us.params += numel;
            if (trainable) {
                us.trainable += numel;
                module_trainable[prm.module] += numel;
                us.grad_elems += numel;
                m_s.op_grad_elems[last_op_of_module[grad_op_module]] += numel;
            }
            if (!m_sharded) {
                us.sharded_bytes += numel * itemSize(orig);
                us.unsharded_bytes += m_mp ? numel * itemSize(m_pdt) : 0;
                if (trainable) {
                    us.rs_input_elems += numel;
                    us.grad_shard_elems += numel;
                    us.opt_elems += numel;
                }
            } else if (!m_fsdp1) {
                const int64_t rows = ceilDiv(d0, m_W);
                const int64_t padded_shard = rows * row;
                const DType pdt = m_tr.param_dtype.value_or(orig);
                us.sharded_bytes += padded_shard * itemSize(orig);
                us.flat_bytes += m_W * padded_shard * itemSize(pdt);
                us.unsharded_bytes += m_W * padded_shard * itemSize(pdt);
                us.cast_bytes += pdt != orig ? padded_shard * itemSize(pdt) : 0;
                if (trainable) {
                    us.rs_input_elems += m_W * padded_shard;
                    us.grad_shard_elems += padded_shard;
                    us.opt_elems += std::min(rows, d0) * row;
                }
            } else {
                // use_orig_params=True: each parameter starts 16-byte aligned in the FlatParameter.
                const int64_t align = std::max<int64_t>(1, 16 / itemSize(orig));
                const int32_t pu = m_s.pidx[m_s.ua.module_unit[prm.module]];
                fsdp1_flat[pu] = ceilDiv(fsdp1_flat[pu], align) * align + numel;
                if (trainable) fsdp1_trainable[pu] += numel;
            }
        }
        if (m_sharded && m_fsdp1) {
            for (size_t u = 0; u < n_units; ++u) {
                UnitSizes& us = m_s.us[u];
                const int64_t total = ceilDiv(fsdp1_flat[u], m_W) * m_W;  // padded to a multiple of W
                const int64_t shard = total / m_W;
                us.sharded_bytes = shard * itemSize(m_master);
                us.unsharded_bytes = total * itemSize(m_pdt);
                us.flat_bytes = 0;  // the all-gather writes straight into the unsharded FlatParameter
                us.cast_bytes = m_mp ? shard * itemSize(m_pdt) : 0;
                if (fsdp1_trainable[u] > 0) {
                    us.rs_input_elems = total;
                    us.grad_shard_elems = shard;
                    us.opt_elems = std::min(shard, fsdp1_trainable[u]);
                }
            }
        }
        m_s.op_frozen.clear();
        if (!m_tr.frozen_regex.empty()) {
            m_s.op_frozen.assign(m_model.ops.size(), 0);
            for (size_t i = 0; i < m_model.ops.size(); ++i) {
                const int32_t m = m_model.ops[i].module;
                m_s.op_frozen[i] = module_params[m] > 0 && module_trainable[m] == 0;
            }
        }
        for (int32_t b : m_model.blocks) ++m_s.us[m_s.pidx[m_s.ua.module_unit[b]]].blocks;

        // reshard_after_forward (rule 5): per strategy, overridable; the root never reshards.
        const bool raf = reshardsAfterForward(m_sh);
        for (size_t u = 0; u < n_units; ++u) m_s.us[u].reshard_after_forward = u == 0 ? false : raf;
        return Ok{};
    }

    // segments: runs of ops of one unit inside one block.
    void buildSegments() {
        const auto n_mod = m_model.modules.size();
        auto& block_of = m_s.block_of;
        block_of.assign(n_mod, -1);
        m_s.block_index.assign(n_mod, 0);
        for (size_t b = 0; b < m_model.blocks.size(); ++b) m_s.block_index[static_cast<size_t>(m_model.blocks[b])] = static_cast<int32_t>(b);
        for (size_t m = 1; m < n_mod; ++m) {
            block_of[m] = m_model.modules[m].is_block ? static_cast<int32_t>(m) : block_of[m_model.modules[m].parent];
        }
        const int64_t act = actBytes();
        const int64_t t = m_tokens, s = m_seq;
        auto bytesOf = [&](const Coef& a, const Coef& f, const Coef& u8, const Coef& i64) {
            return static_cast<int64_t>(a.at(t, s)) * act + static_cast<int64_t>(f.at(t, s)) * 4 +
                   static_cast<int64_t>(u8.at(t, s)) + static_cast<int64_t>(i64.at(t, s)) * 8;
        };
        const Coef none{};
        m_s.segs.clear();
        int32_t cur_unit = -1, cur_block = -2;
        int32_t last_block_seen = -1;
        for (size_t ai = 0; ai < m_s.active.size(); ++ai) {
            const Op& op = m_model.ops[m_s.active[ai]];
            const int32_t unit = m_s.pidx[m_s.ua.module_unit[op.module]];
            const int32_t block = block_of[op.module];
            if (unit != cur_unit || block != cur_block) {
                Segment seg;
                seg.unit = unit;
                seg.op_begin = static_cast<int64_t>(ai);
                seg.checkpointed = m_tr.ac == Checkpointing::Full && block >= 0 &&
                                   m_s.block_index[static_cast<size_t>(block)] % m_tr.ac_every == 0;
                // The checkpoint keeps the block's input once, with its first segment.
                if (seg.checkpointed && block != last_block_seen) {
                    const int64_t hidden_bytes = m_model.arch.hidden > 0
                        ? t * m_model.arch.hidden * act
                        : bytesOf(op.saved_act, op.saved_f32, op.saved_u8, op.saved_i64);
                    seg.saved = hidden_bytes;
                }
                if (block >= 0) last_block_seen = block;
                m_s.segs.push_back(seg);
                cur_unit = unit;
                cur_block = block;
            }
            m_s.segs.back().op_end = static_cast<int64_t>(ai) + 1;
        }
        const bool selective = m_tr.ac == Checkpointing::Selective;
        const int64_t grad_item = itemSize(m_pdt);
        // Op costs for this plan's tokens and dtypes, once per cost class (a repeated block's
        // ops share classes), then per op where the class cannot be shared.
        auto& cost = m_s.op_cost;
        cost.resize(m_s.active.size());
        auto& class_cost = m_s.class_cost;
        auto& class_done = m_s.class_done;
        class_cost.resize(m_model.ops.size());
        class_done.assign(m_model.ops.size(), 0);
        auto opCost = [&](const Op& op) {
            LowerScratch::OpCost c;
            c.saved = bytesOf(op.saved_act, op.saved_f32, op.saved_u8, op.saved_i64);
            c.temp = bytesOf(op.temp_act, op.temp_f32, none, none);
            c.bwd_temp = bytesOf(op.bwd_temp_act, op.bwd_temp_f32, none, none);
            c.flops = static_cast<int64_t>(op.flops.at(t, s));
            c.bwd_flops = static_cast<int64_t>(static_cast<double>(c.flops) * op.bwd_flops_factor);
            c.io = static_cast<int64_t>(op.io_act.at(t, s)) * act;
            return c;
        };
        for (size_t ai = 0; ai < m_s.active.size(); ++ai) {
            const auto oi = static_cast<size_t>(m_s.active[ai]);
            const Op& op = m_model.ops[oi];
            const int32_t cls = op.cost_class;
            if (cls < 0) {
                cost[ai] = opCost(op);
            } else {
                if (!class_done[static_cast<size_t>(cls)]) {
                    class_cost[static_cast<size_t>(cls)] = opCost(op);
                    class_done[static_cast<size_t>(cls)] = 1;
                }
                cost[ai] = class_cost[static_cast<size_t>(cls)];
            }
            if (!m_s.op_frozen.empty() && m_s.op_frozen[oi]) {
                // A frozen weight needs no weight gradient: the backward keeps only dgrad.
                cost[ai].bwd_flops = static_cast<int64_t>(static_cast<double>(cost[ai].flops) *
                                                          std::max(0.0, op.bwd_flops_factor - 1.0));
            }
        }
        // A segment equal to the previous one (same op classes, gradients and weights: the next
        // block of a uniform model) copies its costs instead of recomputing them.
        auto sameAsPrevious = [&](size_t si) {
            if (si == 0) return false;
            const Segment& a = m_s.segs[si - 1];
            const Segment& b = m_s.segs[si];
            if (a.op_end - a.op_begin != b.op_end - b.op_begin || a.checkpointed != b.checkpointed) return false;
            for (int64_t k = 0; k < a.op_end - a.op_begin; ++k) {
                const auto oa = static_cast<size_t>(m_s.active[static_cast<size_t>(a.op_begin + k)]);
                const auto ob = static_cast<size_t>(m_s.active[static_cast<size_t>(b.op_begin + k)]);
                const int32_t ca = m_model.ops[oa].cost_class;
                if (ca < 0 || ca != m_model.ops[ob].cost_class) return false;
                if (m_s.op_grad_elems[oa] != m_s.op_grad_elems[ob] || m_s.op_weight_elems[oa] != m_s.op_weight_elems[ob]) return false;
                if (!m_s.op_frozen.empty() && m_s.op_frozen[oa] != m_s.op_frozen[ob]) return false;
            }
            return true;
        };
        for (size_t si = 0; si < m_s.segs.size(); ++si) {
            Segment& seg = m_s.segs[si];
            if (sameAsPrevious(si)) {
                const Segment& prev = m_s.segs[si - 1];
                const int64_t kept = seg.saved;
                const Segment copy = seg;
                seg = prev;
                seg.unit = copy.unit;
                seg.op_begin = copy.op_begin;
                seg.op_end = copy.op_end;
                seg.saved = seg.checkpointed ? kept : seg.saved_full;
                continue;
            }
            int64_t cum = 0, best = -1, sel_saved = 0;
            for (int64_t ai = seg.op_begin; ai < seg.op_end; ++ai) {
                const auto oi = static_cast<size_t>(m_s.active[static_cast<size_t>(ai)]);
                const LowerScratch::OpCost& c = cost[static_cast<size_t>(ai)];
                seg.fwd_flops += c.flops;
                seg.bwd_flops += c.bwd_flops;
                seg.fwd_hbm += c.io;
                seg.bwd_hbm += 2 * c.io;
                seg.grad_bytes += m_s.op_grad_elems[oi] * grad_item;
                seg.weight_bytes += m_s.op_weight_elems[oi] * grad_item;
                const bool dropped = selective && m_model.ops[oi].selective_recompute;
                if (dropped) {
                    sel_saved += c.saved;
                    seg.bwd_flops += c.flops;  // recomputed inside the backward
                }
                cum += c.saved;
                if (cum + c.temp > best) {
                    best = cum + c.temp;
                    seg.fwd_peak_act = cum;
                    seg.fwd_peak_temp = c.temp;
                }
                seg.ckpt_peak_temp = std::max(seg.ckpt_peak_temp, c.temp + c.saved);
                if (!dropped) seg.saved_full += c.saved;
            }
            if (selective) {
                // Dropped tensors are never held past their op: the forward peak shrinks to match.
                seg.fwd_peak_act = std::min(seg.fwd_peak_act, seg.saved_full);
            }
            if (!seg.checkpointed) seg.saved = seg.saved_full;
            // Backward in reverse op order: gradients appear, saved tensors are released.
            int64_t freed = 0, grads = 0, bbest = INT64_MIN;
            bool sel_pending = sel_saved > 0;
            for (int64_t ai = seg.op_end - 1; ai >= seg.op_begin; --ai) {
                const auto oi = static_cast<size_t>(m_s.active[static_cast<size_t>(ai)]);
                const LowerScratch::OpCost& c = cost[static_cast<size_t>(ai)];
                const bool dropped = selective && m_model.ops[oi].selective_recompute;
                int64_t temp = c.bwd_temp;
                if (dropped && sel_pending) {
                    temp += sel_saved;  // the attention core is recomputed at once
                    sel_pending = false;
                }
                grads += m_s.op_grad_elems[oi] * grad_item;
                const int64_t extra = grads + temp - freed;
                if (extra > bbest) {
                    bbest = extra;
                    seg.bwd_peak_grad = grads;
                    seg.bwd_peak_temp = temp;
                    seg.bwd_peak_freed = freed;
                }
                if (!dropped) freed += c.saved;
            }
        }
    }

    // the forward schedule: pre-forward hooks, segments, post-forward hooks.
    void buildItems() {
        m_s.items.clear();
        auto& chain = m_s.chain;
        for (size_t si = 0; si < m_s.segs.size(); ++si) {
            const Segment& seg = m_s.segs[si];
            const int64_t first = m_s.active[static_cast<size_t>(seg.op_begin)];
            const int64_t last = m_s.active[static_cast<size_t>(seg.op_end - 1)];
            chain.clear();
            for (int32_t u = seg.unit; u >= 0; u = m_s.parent[u]) {
                if (m_s.us[u].first_op == first) chain.push_back(u);
            }
            for (auto it = chain.rbegin(); it != chain.rend(); ++it) m_s.items.push_back({ItemKind::Pre, *it});
            m_s.items.push_back({ItemKind::Seg, static_cast<int32_t>(si)});
            for (int32_t u = seg.unit; u >= 0; u = m_s.parent[u]) {
                if (m_s.us[u].last_op == last) m_s.items.push_back({ItemKind::Post, u});
            }
        }
        // Backward pre-hooks fire in reverse post-forward order.
        m_s.bwd_order.clear();
        for (auto it = m_s.items.rbegin(); it != m_s.items.rend(); ++it) {
            if (it->kind == ItemKind::Post) m_s.bwd_order.push_back(it->index);
        }
        m_s.bwd_pos.assign(m_s.us.size(), -1);
        for (size_t i = 0; i < m_s.bwd_order.size(); ++i) m_s.bwd_pos[m_s.bwd_order[i]] = static_cast<int32_t>(i);
    }

    void fillProgramHeader() {
        m_p.compute_dtype = m_pdt;
        m_p.micro_batches = static_cast<int>(m_tr.grad_accum);
        m_p.tokens_per_micro_batch = m_tokens;
        m_p.model_flops_per_step = static_cast<int64_t>(m_model.modelFlopsPerToken(m_seq) *
                                                        static_cast<double>(m_tokens * m_tr.grad_accum));
        m_p.units.resize(m_s.us.size());
        const int states = optimizerStatesPerParam(m_tr.optimizer);
        int64_t sharded = 0, opt = 0, buffers = 0;
        // The unit's buffers by phase and its collectives, as issueUnshard, waitUnshard, castCopy,
        // postBackward and postBackwardNoShard emit them.
        const auto W = static_cast<int32_t>(m_W), R = static_cast<int32_t>(m_R);
        auto fillBuffers = [&](int32_t u, const UnitSizes& us, UnitInfo& info) {
            const bool trainable = us.grad_elems > 0;
            const bool accumulates = m_tr.no_sync && m_tr.grad_accum > 1 && trainable;
            if (!gathers(u)) {
                // Whole parameters: mixed precision computes on a cast copy; gradients are all-reduced.
                const int64_t cast = m_mp ? us.unsharded_bytes : 0;
                info.unshard_wait_bytes = cast;
                info.unsharded_param_bytes = cast;
                if (trainable) {
                    const bool via_buffer = m_mp || m_rdt != m_master;
                    info.all_reduce = UnitCollective{via_buffer ? us.rs_input_elems * itemSize(m_rdt)
                                                                : us.grad_shard_elems * itemSize(m_master),
                                                     m_mesh.world_size, m_world_nodes};
                }
                if (accumulates && m_mp) info.no_sync_grad_bytes = us.grad_elems * itemSize(m_pdt);
                return;
            }
            const int64_t gathered = m_fsdp1 ? us.unsharded_bytes : us.flat_bytes;  // all-gather S
            info.unshard_in_flight_bytes = gathered;
            info.unshard_wait_bytes = m_fsdp1 ? us.unsharded_bytes : us.flat_bytes + us.unsharded_bytes;
            info.unsharded_param_bytes = us.unsharded_bytes;
            info.all_gather = UnitCollective{gathered, W, m_ag_nodes};
            if (us.reshard_after_forward) {
                const int k = postForwardK();
                info.all_gather_bwd = UnitCollective{gathered, k > 0 ? k : W, k > 0 ? m_ag_count_nodes : m_ag_nodes};
                info.post_forward_shard_bytes = k > 0 ? us.unsharded_bytes / k : 0;
            }
            if (trainable) {
                info.reduce_scatter_input_bytes = us.rs_input_elems * itemSize(m_rdt);
                info.reduce_scatter = UnitCollective{info.reduce_scatter_input_bytes, W, m_ag_nodes};
                if (m_R > 1) info.all_reduce = UnitCollective{us.grad_shard_elems * itemSize(m_rdt), R, m_rep_nodes};
            }
            if (accumulates) {
                // FSDP2 upcasts held gradients to reduce_dtype; FSDP1 keeps them as autograd wrote them.
                info.no_sync_grad_bytes = us.grad_elems * itemSize(!m_fsdp1 && m_rdt != m_pdt ? m_rdt : m_pdt);
            }
        };
        for (size_t u = 0; u < m_s.us.size(); ++u) {
            const UnitSizes& us = m_s.us[u];
            UnitInfo& info = m_p.units[u];
            const UnitSpec& spec = m_s.ua.units[static_cast<size_t>(m_s.order[u])];
            info.name = spec.name;
            info.is_root = u == 0;
            info.reshard_after_forward = us.reshard_after_forward;
            info.blocks = us.blocks;
            info.params = us.params;
            info.trainable_params = us.trainable;
            info.sharded_bytes = us.sharded_bytes;
            info.unsharded_bytes = m_sharded ? us.unsharded_bytes : (m_mp ? us.unsharded_bytes : us.sharded_bytes);
            info.grad_shard_bytes = us.grad_shard_elems * itemSize(m_master);
            info.fwd_flops = 0;
            info.activation_bytes = 0;
            fillBuffers(static_cast<int32_t>(u), us, info);
            sharded += us.sharded_bytes;
            opt += us.opt_elems * states * itemSize(m_master);
        }
        for (const Segment& seg : m_s.segs) {
            m_p.units[seg.unit].fwd_flops += seg.fwd_flops;
            m_p.units[seg.unit].activation_bytes += seg.saved;
        }
        for (const BufferSpec& b : m_model.buffers) buffers += b.numel * itemSize(b.dtype);
        const GpuSpec& gpu = m_plan.cluster.gpu;
        int communicators = 1;  // the default (world) process group
        if (m_sharded && m_W != m_mesh.world_size) ++communicators;
        if (m_R > 1 && m_sharded) ++communicators;
        m_p.initial[index(MemCategory::RuntimeOverhead)] =
            gpu.cuda_context_bytes + gpu.cublas_workspace_bytes + communicators * gpu.nccl_bytes_per_communicator;
        m_p.initial[index(MemCategory::Buffer)] = buffers;
        if (m_offload) {
            m_p.host_param_bytes = sharded;
            m_p.host_optimizer_bytes = opt;
            int64_t grads = 0;
            for (const UnitSizes& us : m_s.us) grads += us.grad_shard_elems * itemSize(m_master);
            m_p.host_grad_bytes = grads;
        } else {
            m_p.initial[index(MemCategory::ShardedParam)] = sharded;
            m_p.initial[index(MemCategory::OptState)] = opt;
        }
    }

    // task emission.
    int32_t newTask(TaskKind kind, Stream stream, int32_t unit, int mb) {
        Task t;
        t.kind = kind;
        t.stream = stream;
        t.unit = unit;
        t.micro_batch = static_cast<int16_t>(mb);
        t.deps.offset = static_cast<uint32_t>(m_p.deps.size());
        t.mem_start.offset = static_cast<uint32_t>(m_p.mem.size());
        t.mem_peak.offset = t.mem_start.offset;
        t.mem_end.offset = t.mem_start.offset;
        m_p.tasks.push_back(t);
        m_phase = Phase::Start;
        const auto id = static_cast<int32_t>(m_p.tasks.size() - 1);
        if (!m_s.host_pending.empty() && (stream == Stream::Compute || stream == Stream::Host)) {
            // The end-of-backward callback: the compute stream waits for the last reductions,
            // then their buffers are freed.
            for (int32_t d : m_host_pending_deps) dep(d);
            m_host_pending_deps = {-1, -1};
            for (const MemEvent& e : m_s.host_pending) start(e.category, e.bytes);
            m_s.host_pending.clear();
        }
        m_last_on_stream[static_cast<size_t>(stream)] = id;
        if (stream == Stream::Compute) m_last_compute = id;
        return id;
    }
    Task& cur() { return m_p.tasks.back(); }
    int32_t curId() const { return static_cast<int32_t>(m_p.tasks.size() - 1); }
    void dep(int32_t id) {
        if (id < 0 || id == curId()) return;
        m_p.deps.push_back(id);
        ++cur().deps.count;
    }
    void push(Span& span, MemCategory c, int64_t bytes, int32_t timed_after = -1) {
        m_p.mem.push_back(MemEvent{bytes, c, timed_after});
        if (span.count == 0) span.offset = static_cast<uint32_t>(m_p.mem.size() - 1);
        ++span.count;
    }
    void start(MemCategory c, int64_t bytes, int32_t timed_after = -1) {
        if (bytes == 0) return;
        assert(m_phase == Phase::Start);
        push(cur().mem_start, c, bytes, timed_after);
    }
    void peak(MemCategory c, int64_t bytes) {
        if (bytes == 0) return;
        assert(m_phase != Phase::End);
        m_phase = Phase::Peak;
        push(cur().mem_peak, c, bytes);
    }
    void end(MemCategory c, int64_t bytes, int32_t timed_after = -1) {
        if (bytes == 0) return;
        m_phase = Phase::End;
        push(cur().mem_end, c, bytes, timed_after);
    }
    void host(MemCategory c, int64_t bytes) {
        if (bytes != 0) m_s.host_pending.push_back(MemEvent{bytes, c});
    }

    bool gathers(int32_t u) const { return m_sharded && m_s.us[u].first_op != INT_MAX; }
    int64_t flatBytes(int32_t u) const { return m_s.us[u].flat_bytes; }
    int postForwardK() const {
        return m_sh.reshard_after_forward == ReshardMode::Count ? m_sh.reshard_after_forward_k : 0;
    }

    void issueUnshard(int32_t u, int mb, bool backward) {
        UnitState& st = m_s.st[u];
        const UnitSizes& us = m_s.us[u];
        if (st.unsharded || st.ag_pending) return;
        int32_t host_wait = -1;
        if (m_fsdp1 && m_sh.limit_all_gathers && m_s.free_queue.size() >= 2) {
            host_wait = m_s.free_queue.front();
            m_s.free_queue.erase(m_s.free_queue.begin());
        }
        int32_t h2d = -1;
        if (m_offload) {
            h2d = newTask(TaskKind::HostToDevice, Stream::HostToDevice, u, mb);
            cur().host_wait = host_wait;
            cur().comm_bytes = us.sharded_bytes;
            start(MemCategory::Temp, us.sharded_bytes);
        }
        newTask(TaskKind::CopyIn, Stream::AllGatherCopyIn, u, mb);
        if (h2d < 0) cur().host_wait = host_wait;
        dep(h2d);
        dep(m_ag_wait);
        cur().hbm_bytes = us.sharded_bytes + us.cast_bytes;
        if (m_fsdp1) {
            start(MemCategory::AllGather, us.cast_bytes);  // the low-precision shard (_mp_shard)
        } else {
            start(MemCategory::AllGather, us.flat_bytes);
            peak(MemCategory::AllGather, us.cast_bytes);
        }
        if (m_offload) end(MemCategory::Temp, -us.sharded_bytes);
        const int32_t copy_in = curId();
        st.ag_task = newTask(TaskKind::AllGather, Stream::AllGather, u, mb);
        dep(copy_in);
        const bool count_mode = backward && st.post_fwd_shard;
        collectiveOn(count_mode ? kPostForwardPg : kShardPg);
        cur().comm_bytes = m_fsdp1 ? us.unsharded_bytes : us.flat_bytes;
        cur().group_size = static_cast<int32_t>(count_mode ? postForwardK() : m_W);
        cur().group_nodes = count_mode ? m_ag_count_nodes : m_ag_nodes;
        if (m_fsdp1) {
            start(MemCategory::UnshardedParam, us.unsharded_bytes);
            end(MemCategory::AllGather, -us.cast_bytes);
            if (st.post_fwd_shard) {
                end(MemCategory::ShardedParam, -us.unsharded_bytes / postForwardK());
                st.post_fwd_shard = false;
            }
        }
        st.ag_pending = true;
    }

    void waitUnshard(int32_t u, int mb, bool backward) {
        UnitState& st = m_s.st[u];
        const UnitSizes& us = m_s.us[u];
        if (m_fsdp1) {
            m_pending_compute_dep = st.ag_task;
        } else {
            const int32_t id = newTask(TaskKind::CopyOut, Stream::Compute, u, mb);
            dep(st.ag_task);
            cur().hbm_bytes = 2 * us.unsharded_bytes;
            if (!backward && m_saved_flat >= 0) {
                start(MemCategory::AllGather, -flatBytes(m_saved_flat), m_s.st[m_saved_flat].copyout_task);
                m_ag_wait = m_s.st[m_saved_flat].copyout_task;
                m_saved_flat = -1;
            }
            if (st.post_fwd_shard) {
                start(MemCategory::ShardedParam, -us.unsharded_bytes / postForwardK());
                st.post_fwd_shard = false;
            }
            start(MemCategory::UnshardedParam, us.unsharded_bytes);
            if (backward) {
                end(MemCategory::AllGather, -us.flat_bytes);
                m_ag_wait = id;
            } else {
                m_saved_flat = u;
            }
            st.copyout_task = id;
        }
        st.ag_pending = false;
        st.unsharded = true;
    }

    // NO_SHARD (and shard groups of one rank): parameters are whole; mixed precision casts a copy.
    void castCopy(int32_t u, int mb) {
        UnitState& st = m_s.st[u];
        if (st.unsharded) return;
        if (m_mp) {
            newTask(TaskKind::Cast, Stream::Compute, u, mb);
            cur().hbm_bytes = m_s.us[u].sharded_bytes + m_s.us[u].unsharded_bytes;
            start(MemCategory::UnshardedParam, m_s.us[u].unsharded_bytes);
        }
        st.unsharded = true;
    }

    void freeUnsharded(int32_t u, bool count_mode) {
        UnitState& st = m_s.st[u];
        if (!st.unsharded) return;
        if (m_sharded || m_mp) end(MemCategory::UnshardedParam, -m_s.us[u].unsharded_bytes);
        if (count_mode && m_sharded) {
            end(MemCategory::ShardedParam, m_s.us[u].unsharded_bytes / postForwardK());
            st.post_fwd_shard = true;
        }
        st.unsharded = false;
        if (m_fsdp1) m_s.free_queue.push_back(curId());
    }

    void preForward(int32_t u, int mb) {
        if (!gathers(u)) {
            castCopy(u, mb);
            return;
        }
        if (m_s.st[u].unsharded) return;
        issueUnshard(u, mb, false);
        waitUnshard(u, mb, false);
        // Explicit forward prefetch (FSDP1 forward_prefetch; FSDP2 set_modules_to_forward_prefetch
        // when prefetch_depth > 1) issues the next units' all-gathers before this unit computes.
        // Units are numbered in forward order.
        const int ahead = m_fsdp1 ? (m_sh.forward_prefetch ? 1 : 0) : std::max(0, m_sh.prefetch_depth - 1);
        for (int d = 1; d <= ahead; ++d) {
            const auto v = static_cast<int32_t>(u + d);
            if (static_cast<size_t>(v) >= m_s.us.size() || !gathers(v)) break;
            if (!m_s.st[v].unsharded) issueUnshard(v, mb, false);
        }
    }

    void postForward(int32_t u) {
        if (u == 0) {
            // The root frees the last deferred all-gather output; it is not resharded.
            if (m_saved_flat >= 0) {
                end(MemCategory::AllGather, -flatBytes(m_saved_flat), m_s.st[m_saved_flat].copyout_task);
                m_ag_wait = m_s.st[m_saved_flat].copyout_task;
                m_saved_flat = -1;
            }
            return;
        }
        if (!m_s.us[u].reshard_after_forward) return;
        freeUnsharded(u, postForwardK() > 0);
    }

    void computeTask(TaskKind kind, int32_t unit, int mb) {
        newTask(kind, Stream::Compute, unit, mb);
        dep(m_pending_compute_dep);
        m_pending_compute_dep = -1;
    }

    void forwardPass(int mb) {
        bool first = true;
        const int64_t inputs = 2 * 8 * m_tokens;  // input_ids + labels, int64
        for (const Item& it : m_s.items) {
            switch (it.kind) {
                case ItemKind::Pre: preForward(it.index, mb); break;
                case ItemKind::Post: postForward(it.index); break;
                case ItemKind::Seg: {
                    const Segment& seg = m_s.segs[static_cast<size_t>(it.index)];
                    computeTask(TaskKind::Forward, seg.unit, mb);
                    if (first) start(MemCategory::Inputs, inputs);
                    first = false;
                    cur().flops = seg.fwd_flops;
                    cur().hbm_bytes = seg.fwd_hbm + seg.weight_bytes;
                    if (seg.checkpointed) {
                        peak(MemCategory::Temp, seg.ckpt_peak_temp);
                    } else {
                        peak(MemCategory::Activation, seg.fwd_peak_act);
                        peak(MemCategory::Temp, seg.fwd_peak_temp);
                    }
                    end(MemCategory::Activation, seg.saved);
                    break;
                }
            }
        }
    }

    void preBackward(int32_t u, int mb) {
        if (!gathers(u)) {
            castCopy(u, mb);
            return;
        }
        if (!m_s.st[u].unsharded) {
            issueUnshard(u, mb, true);
            waitUnshard(u, mb, true);
        }
        const bool pre = !m_fsdp1 || m_sh.backward_prefetch == ShardingSpec::BackwardPrefetch::Pre;
        if (pre) prefetchAfter(u, mb);
    }

    void prefetchAfter(int32_t u, int mb) {
        const int depth = m_fsdp1 ? 1 : std::max(1, m_sh.prefetch_depth);
        const int32_t pos = m_s.bwd_pos[u];
        for (int d = 1; d <= depth; ++d) {
            const size_t next = static_cast<size_t>(pos + d);
            if (pos < 0 || next >= m_s.bwd_order.size()) break;
            const int32_t v = m_s.bwd_order[next];
            if (gathers(v) && !m_s.st[v].unsharded) issueUnshard(v, mb, true);
        }
    }

    void backwardSegment(const Segment& seg, int mb) {
        UnitState& st = m_s.st[seg.unit];
        if (seg.checkpointed) {
            computeTask(TaskKind::Recompute, seg.unit, mb);
            cur().flops = seg.fwd_flops;
            cur().hbm_bytes = seg.fwd_hbm + seg.weight_bytes;
            peak(MemCategory::Activation, seg.fwd_peak_act);
            peak(MemCategory::Temp, seg.fwd_peak_temp);
            end(MemCategory::Activation, seg.saved_full);
        }
        computeTask(TaskKind::Backward, seg.unit, mb);
        cur().flops = seg.bwd_flops;
        cur().hbm_bytes = seg.bwd_hbm + 2 * seg.weight_bytes;  // read weights, write their grads
        // fp32 DDP without mixed precision: autograd writes straight into param.grad.
        const bool direct = !m_sharded && !m_mp;
        const MemCategory gcat = direct ? MemCategory::ShardedGrad : MemCategory::UnshardedGrad;
        const bool persistent = direct ? !st.sharded_grad : !st.acc_live;
        peak(gcat, seg.bwd_peak_grad);
        peak(MemCategory::Temp, seg.bwd_peak_temp);
        peak(MemCategory::Activation, -seg.bwd_peak_freed);
        end(MemCategory::Activation, -(seg.checkpointed ? seg.saved_full + seg.saved : seg.saved));
        if (persistent) {
            end(gcat, seg.grad_bytes);
            if (!direct) st.grads_live += seg.grad_bytes;
        }
    }

    void postBackward(int32_t u, int mb) {
        UnitState& st = m_s.st[u];
        const UnitSizes& us = m_s.us[u];
        const bool sync = !m_tr.no_sync || mb == m_tr.grad_accum - 1;
        const int32_t producer = m_last_compute;
        if (!gathers(u)) {
            postBackwardNoShard(u, mb, sync, producer);
            return;
        }
        if (m_fsdp1 && m_sh.backward_prefetch == ShardingSpec::BackwardPrefetch::Post) prefetchAfter(u, mb);
        if (!sync) {
            freeUnsharded(u, false);
            if (!st.acc_live) {
                if (!m_fsdp1 && m_rdt != m_pdt && us.grad_elems > 0) {
                    // FSDP2 upcasts held gradients to reduce_dtype (after resharding, to save memory).
                    newTask(TaskKind::Cast, Stream::Compute, u, mb);
                    cur().hbm_bytes = st.grads_live + us.grad_elems * itemSize(m_rdt);
                    start(MemCategory::UnshardedGrad, us.grad_elems * itemSize(m_rdt));
                    start(MemCategory::UnshardedGrad, -st.grads_live);
                    st.acc_bytes = us.grad_elems * itemSize(m_rdt);
                } else {
                    st.acc_bytes = st.grads_live;
                }
                st.grads_live = 0;
                st.acc_live = true;
            }
            return;
        }
        if (us.grad_elems == 0) {
            freeUnsharded(u, false);
            return;
        }
        // Rule 7: free unsharded params, free the previous reduce-scatter input, allocate this
        // one in reduce_dtype, free the unsharded grads, reduce-scatter on its own stream.
        newTask(TaskKind::ReduceScatter, Stream::ReduceScatter, u, mb);
        dep(producer);
        collectiveOn(kShardPg);
        if (st.unsharded) {
            start(MemCategory::UnshardedParam, -us.unsharded_bytes);
            st.unsharded = false;
            if (m_fsdp1) m_s.free_queue.push_back(curId());
        }
        const int64_t rs_in = us.rs_input_elems * itemSize(m_rdt);
        const int64_t rs_out = us.grad_shard_elems * itemSize(m_rdt);
        const int64_t shard_master = us.grad_shard_elems * itemSize(m_master);
        start(MemCategory::ReduceScatter, -m_pending_rs);
        start(MemCategory::ReduceScatter, rs_in);
        start(MemCategory::UnshardedGrad, -(st.grads_live + (st.acc_live ? st.acc_bytes : 0)));
        st.grads_live = 0;
        st.acc_live = false;
        st.acc_bytes = 0;
        const bool becomes_grad = !st.sharded_grad && m_rdt == m_master && !m_offload;
        start(becomes_grad ? MemCategory::ShardedGrad : MemCategory::ReduceScatter, rs_out);
        cur().comm_bytes = rs_in;
        cur().group_size = static_cast<int32_t>(m_W);
        cur().group_nodes = m_ag_nodes;
        m_pending_rs = rs_in;
        if (m_R > 1) {
            const int32_t rs = curId();
            newTask(TaskKind::AllReduce, Stream::AllReduce, u, mb);
            dep(rs);
            collectiveOn(kReplicatePg);
            cur().comm_bytes = rs_out;
            cur().group_size = static_cast<int32_t>(m_R);
            cur().group_nodes = m_rep_nodes;
        }
        const Stream post_stream = m_R > 1 ? Stream::AllReduce : Stream::ReduceScatter;
        if (!becomes_grad) {
            const bool first = !st.sharded_grad && !m_offload;
            if (m_rdt != m_master) {
                const int32_t prev = curId();
                newTask(TaskKind::Cast, post_stream, u, mb);
                dep(prev);
                cur().hbm_bytes = rs_out + shard_master;
                start(first ? MemCategory::ShardedGrad : MemCategory::Temp, shard_master);
                end(MemCategory::ReduceScatter, -rs_out);
                if (!first && !m_offload) end(MemCategory::Temp, -shard_master);  // accumulated (+=)
            } else if (!m_offload) {
                end(MemCategory::ReduceScatter, -rs_out);  // accumulated into the existing grad
            }
            if (m_offload) {
                const int32_t prev = curId();
                newTask(TaskKind::DeviceToHost, Stream::DeviceToHost, u, mb);
                dep(prev);
                cur().comm_bytes = shard_master;
                end(m_rdt != m_master ? MemCategory::Temp : MemCategory::ReduceScatter,
                    -(m_rdt != m_master ? shard_master : rs_out));
            }
        }
        if (!m_offload) st.sharded_grad = true;
    }

    void postBackwardNoShard(int32_t u, int mb, bool sync, int32_t producer) {
        UnitState& st = m_s.st[u];
        const UnitSizes& us = m_s.us[u];
        if (!m_mp && us.grad_elems > 0) st.sharded_grad = true;  // autograd wrote param.grad directly
        if (us.grad_elems == 0 || !sync) {
            if (m_mp && st.unsharded) end(MemCategory::UnshardedParam, -us.unsharded_bytes);
            st.unsharded = false;
            if (!sync && m_mp && us.grad_elems > 0) {
                st.acc_live = true;
                st.acc_bytes += st.grads_live;
                st.grads_live = 0;
            }
            return;
        }
        newTask(TaskKind::AllReduce, Stream::AllReduce, u, mb);
        dep(producer);
        collectiveOn(kWorldPg);
        if (m_mp && st.unsharded) start(MemCategory::UnshardedParam, -us.unsharded_bytes);
        st.unsharded = false;
        const int64_t buf = us.rs_input_elems * itemSize(m_rdt);
        const int64_t master = us.grad_shard_elems * itemSize(m_master);
        cur().comm_bytes = m_mp || m_rdt != m_master ? buf : master;
        cur().group_size = static_cast<int32_t>(m_mesh.world_size);
        cur().group_nodes = m_world_nodes;
        if (m_mp) {
            const int64_t held = st.grads_live + (st.acc_live ? st.acc_bytes : 0);
            if (m_rdt != m_pdt) {
                start(MemCategory::Temp, buf);
                start(MemCategory::UnshardedGrad, -held);
            }
            if (!st.sharded_grad) end(MemCategory::ShardedGrad, master);
            if (m_rdt != m_pdt) {
                end(MemCategory::Temp, -buf);
            } else {
                end(MemCategory::UnshardedGrad, -held);
            }
            st.grads_live = 0;
            st.acc_live = false;
            st.acc_bytes = 0;
        }
        st.sharded_grad = true;
    }

    void backwardPass(int mb) {
        for (auto it = m_s.items.rbegin(); it != m_s.items.rend(); ++it) {
            switch (it->kind) {
                case ItemKind::Post: preBackward(it->index, mb); break;
                case ItemKind::Seg: backwardSegment(m_s.segs[static_cast<size_t>(it->index)], mb); break;
                case ItemKind::Pre: postBackward(it->index, mb); break;
            }
        }
        // The final callback makes the compute stream wait for the last reduce-scatter (and
        // all-reduce), then frees the reduce-scatter input; the batch's inputs go too.
        host(MemCategory::ReduceScatter, -m_pending_rs);
        m_pending_rs = 0;
        host(MemCategory::Inputs, -2 * 8 * m_tokens);
        m_host_pending_deps = {m_last_on_stream[static_cast<size_t>(Stream::ReduceScatter)],
                               m_last_on_stream[static_cast<size_t>(Stream::AllReduce)]};
    }

    void optimizerStep() {
        const int states = optimizerStatesPerParam(m_tr.optimizer);
        int64_t elems = 0, sharded_grads = 0;
        for (size_t u = 0; u < m_s.us.size(); ++u) {
            elems += m_s.us[u].opt_elems;
            if (m_s.st[u].sharded_grad) sharded_grads += m_s.us[u].grad_shard_elems * itemSize(m_master);
        }
        const std::array<Stream, 4> reduce_streams{Stream::ReduceScatter, Stream::AllReduce, Stream::DeviceToHost,
                                                   Stream::Compute};
        std::array<int32_t, 4> waits{};
        for (size_t i = 0; i < reduce_streams.size(); ++i) waits[i] = m_last_on_stream[static_cast<size_t>(reduce_streams[i])];
        newTask(TaskKind::OptimizerStep, m_offload ? Stream::Host : Stream::Compute, -1, static_cast<int>(m_tr.grad_accum - 1));
        for (int32_t w : waits) dep(w);
        const int64_t item = itemSize(m_master);
        cur().flops = elems * (m_tr.optimizer == Optimizer::AdamW ? 12 : 2 * (1 + states));
        cur().hbm_bytes = elems * item * (3 + 2 * states);  // read param, grad, states; write param, states
        cur().host_blocks = m_offload;
        // PyTorch's default foreach AdamW keeps one temporary of the parameters' size (sqrt(v)).
        if (!m_offload && m_tr.optimizer == Optimizer::AdamW) peak(MemCategory::Temp, elems * item);
        end(MemCategory::ShardedGrad, -sharded_grads);  // zero_grad(set_to_none=True)
        int64_t flops = 0;
        for (const Task& t : m_p.tasks) flops += t.flops;
        m_p.hardware_flops_per_step = flops;
    }
};

}  // namespace

Lowerer::Lowerer() : m_scratch(std::make_unique<LowerScratch>()) {}
Lowerer::~Lowerer() = default;
Lowerer::Lowerer(Lowerer&&) noexcept = default;
Lowerer& Lowerer::operator=(Lowerer&&) noexcept = default;

Status Lowerer::lower(const Plan& plan, const Mesh& mesh, Program& out) {
    assert(plan.model && "lower() needs a model");
    Lowering lowering(plan, mesh, out, *m_scratch);
    return lowering.run();
}

Status lower(const Plan& plan, const Mesh& mesh, Program& out) {
    Lowerer lowerer;
    return lowerer.lower(plan, mesh, out);
}

}  // namespace shardcast::core
