// The lowering's driver: plan-wide settings, the Program header and the primitives that append
// tasks and memory events. The FSDP rules live in lower_sizes.cpp, lower_segments.cpp and
// lower_schedule.cpp (see core/lower/lower_internal.hpp).
#include "core/lower/lower.hpp"

#include <algorithm>
#include <cassert>
#include <numeric>

#include "core/lower/lower_internal.hpp"

namespace shardcast::core {
namespace detail {
namespace {

// Nodes spanned by the ranks first, first + stride, ... (count of them).
int nodesOfRun(int64_t first, int64_t stride, int64_t count, int64_t gpus_per_node) {
    if (count <= 0) return 0;
    if (stride == 1) return static_cast<int>((first + count - 1) / gpus_per_node - first / gpus_per_node + 1);
    if (stride >= gpus_per_node) return static_cast<int>(count);
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

// The most nodes any instance of a group spans. Two instances whose first ranks differ by a
// multiple of the node size span alike, so one period of lcm(size * stride, gpus_per_node) ranks
// and at most gpus_per_node offsets cover every case.
int widestInstanceNodes(int64_t size, int64_t stride, int64_t world, int64_t gpus_per_node) {
    const int64_t span = size * stride;
    const int64_t period = std::min(world, std::lcm(span, gpus_per_node));
    int widest = 1;
    for (int64_t block = 0; block < period; block += span) {
        for (int64_t offset = 0; offset < stride && offset < gpus_per_node; ++offset) {
            widest = std::max(widest, nodesOfRun(block + offset, stride, size, gpus_per_node));
        }
    }
    return widest;
}

}  // namespace

Lowering::Lowering(const Plan& plan, const Mesh& mesh, Program& out, LowerScratch& scratch, int stage,
                   std::shared_ptr<const Model> full_model, const ChunkContext& chunk)
    : m_plan(plan), m_model(*plan.model), m_tr(plan.training), m_sh(plan.sharding), m_mesh(mesh), m_p(out),
      m_s(scratch), m_full_model(full_model ? std::move(full_model) : plan.model), m_pp(mesh.pp),
      m_virtual(mesh.virtual_stages), m_stage(stage), m_chunk(chunk.chunk), m_unit_offset(chunk.unit_offset) {
    m_s.host_pending.clear();
    m_s.free_queue.clear();
    m_host_events = chunk.host_events ? chunk.host_events : &m_s.host_pending;
    m_steps = chunk.steps;
    if (chunk.host_deps) m_host_deps = chunk.host_deps;
}

Status Lowering::prepare() {
    configure();
    if (auto s = resolveUnits(m_model, m_sh.wrap, m_s.ua); !s) return s;
    orderUnits();
    if (auto s = findFrozenParams(); !s) return s;
    unitSizes();
    reshardAfterForwardPerUnit();
    buildSegments();
    buildItems();
    fillProgramHeader();
    return Ok{};
}

Status Lowering::run() {
    m_p.clear();
    if (auto s = prepare(); !s) return s;
    if (m_pp > 1) {
        pipelineStep();
    } else {
        for (int mb = 0; mb < m_tr.grad_accum; ++mb) {
            forwardPass(mb);
            backwardPass(mb);
        }
    }
    optimizerStep();
    // On a host device (CPUs, gloo) the host runs each kernel itself, and FSDP waits for each
    // collective as soon as it has issued it: every task blocks the host, nothing overlaps.
    if (m_plan.cluster.gpu.host_device) {
        for (Task& t : m_p.tasks) t.host_blocks = true;
    }
    return Ok{};
}

void Lowering::configure() {
    m_W = m_mesh.shard_size;
    m_R = m_mesh.replicate_size;
    m_tp = m_mesh.tp;
    m_sp = m_sh.sequence_parallel;
    m_lp = m_sh.loss_parallel;
    m_fsdp1 = m_sh.fsdp_version == 1;
    m_sharded = m_sh.strategy != Strategy::NoShard && m_W > 1;
    m_master = m_tr.master_dtype;
    m_pdt = m_tr.computeDtype();
    m_rdt = m_tr.reduceDtype();
    m_mp = m_pdt != m_master;
    m_offload = m_tr.offload == Offload::Cpu;
    m_tokens = m_tr.tokens();
    m_seq = m_tr.seq_len;
    m_last_on_stream.fill(-1);
    m_last_collective.fill(-1);
    // Pipeline parallelism: this stage's place and the micro-batches it holds at once (PP2).
    m_first_stage = m_stage == 0;
    m_last_stage = m_stage == m_pp * m_virtual - 1;
    m_slots = 1;
    if (m_pp > 1) {
        // The rank's schedule (given by the driver under Interleaved1F1B), and the most micro-batches
        // between their forward and their backward on this stage at once.
        if (!m_steps) {
            m_s.pipeline_steps = pipelineRankSchedule(m_sh.pp_schedule, m_pp, m_virtual, static_cast<int>(m_tr.grad_accum),
                                                      m_stage % m_pp);
            m_steps = &m_s.pipeline_steps;
        }
        int held = 0;
        for (const PipelineStep& a : *m_steps) {
            if (a.stage != m_stage) continue;
            if (a.op == PipelineOp::Forward) m_slots = std::max(m_slots, ++held);
            if (a.op == PipelineOp::Backward) --held;
        }
    }
    m_inputs.assign(static_cast<size_t>(m_slots), BufferRef{});
    m_recv_act.assign(static_cast<size_t>(m_slots), BufferRef{});
    m_stage_out.assign(static_cast<size_t>(m_slots), BufferRef{});
    m_recv_grad.assign(static_cast<size_t>(m_slots), BufferRef{});
    m_final_reduce = false;
    m_recv_dep = -1;
    // The process groups the step's collectives run on (ranks laid out
    // rank = ((p * R + r) * W + s) * tp + t; every collective stays inside one stage).
    m_p.world_size = m_mesh.world_size;
    m_p.tp_size = static_cast<int32_t>(m_tp);
    m_p.pp_size = m_pp;
    m_p.pp_stage = m_stage % m_pp;
    m_p.pp_virtual = m_virtual;
    m_group.fill(-1);
    addGroup(GroupKind::World, m_mesh.world_size / m_pp, 1);
    if (m_pp > 1) addGroup(GroupKind::Pipeline, m_pp, m_mesh.world_size / m_pp);
    if (m_sharded) addGroup(GroupKind::Shard, m_W, m_tp);
    if (m_sharded && m_R > 1) addGroup(GroupKind::Replicate, m_R, m_W * m_tp);
    if (m_sharded && postForwardK() > 0) addGroup(GroupKind::PostForward, postForwardK(), m_tp);
    if (m_tp > 1) {
        addGroup(GroupKind::Tensor, m_tp, 1);
        tpLocalOps();
    }
}

void Lowering::addGroup(GroupKind kind, int64_t size, int64_t stride) {
    if (m_chunk > 0) {
        // The rank's later stages run on the process groups its first stage made (one device mesh).
        for (size_t i = 0; i < m_p.groups.size(); ++i) {
            if (m_p.groups[i].kind == kind) m_group[static_cast<size_t>(kind)] = static_cast<int32_t>(i);
        }
        return;
    }
    ProcessGroup g;
    g.kind = kind;
    g.size = static_cast<int32_t>(size);
    g.stride = static_cast<int32_t>(stride);
    g.nodes = widestInstanceNodes(size, stride, m_mesh.world_size, m_plan.cluster.gpus_per_node);
    m_group[static_cast<size_t>(kind)] = static_cast<int32_t>(m_p.groups.size());
    m_p.groups.push_back(g);
}

void Lowering::fillProgramHeader() {
    m_p.compute_dtype = m_pdt;
    m_p.micro_batches = static_cast<int>(m_tr.grad_accum);
    m_p.tokens_per_micro_batch = m_tokens;
    if (m_s.flops_model != m_full_model || m_s.flops_seq != m_seq) {
        m_s.flops_model = m_full_model;
        m_s.flops_seq = m_seq;
        m_s.flops_per_token = m_full_model->modelFlopsPerToken(m_seq);
    }
    // A tp group shares its micro-batches' work, and so do the pp stages (torchtitan's convention:
    // the whole model's FLOPs per token over the non-data-parallel ranks): each rank does
    // 1 / (tp * pp) of it.
    m_p.model_flops_per_step = m_s.flops_per_token * static_cast<double>(m_tokens) *
                               static_cast<double>(m_tr.grad_accum) / static_cast<double>(m_tp * m_pp);
    m_p.units.resize(static_cast<size_t>(m_unit_offset) + m_s.us.size());
    const int states = optimizerStatesPerParam(m_tr.optimizer);
    int64_t sharded = 0, opt = 0, buffers = 0;
    for (size_t u = 0; u < m_s.us.size(); ++u) {
        const UnitSizes& us = m_s.us[u];
        UnitInfo& info = unitInfo(u);
        const UnitSpec& spec = m_s.ua.units[static_cast<size_t>(m_s.order[u])];
        info.name = u == 0 && m_virtual > 1 ? "(root of stage " + std::to_string(m_stage) + ")" : spec.name;
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
        unitBufferTable(static_cast<int32_t>(u), info);
        sharded += us.sharded_bytes;
        opt += us.opt_elems * states * itemSize(m_master);
    }
    for (const Segment& seg : m_s.segs) {
        unitInfo(seg.unit).fwd_flops += seg.fwd_flops;
        unitInfo(seg.unit).activation_bytes += seg.saved + seg.sac_kept;
    }
    for (const BufferSpec& b : m_model.buffers) {
        if (b.transformers4_only && m_tr.hf_mask != HfMask::V4) continue;  // not in transformers 5's module
        buffers += b.numel * itemSize(b.dtype);
    }
    const GpuSpec& gpu = m_plan.cluster.gpu;
    int communicators = 1;  // the default (world) process group
    if (m_sharded && m_W != m_mesh.world_size) ++communicators;
    if (m_R > 1 && m_sharded) ++communicators;
    if (m_tp > 1) ++communicators;
    if (m_pp > 1) ++communicators;
    if (m_chunk > 0) {
        // Interleaved1F1B: the rank's later stages add their shards, states and buffers.
        m_p.initial[index(MemCategory::Buffer)] += buffers;
        m_p.initial[index(MemCategory::ShardedParam)] += sharded;
        m_p.initial[index(MemCategory::OptState)] += opt;
        return;
    }
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

int32_t Lowering::newTask(TaskKind kind, Stream stream, int32_t unit, int mb) {
    // Built in place: a Task assembled on the stack and copied in stalls on store forwarding.
    // Copied from a constant blank task: value-initialising one in place zero-fills it with
    // `rep stos`, whose start-up cost was most of this function's time.
    static const Task kBlank{};
    Task& t = m_p.tasks.emplace_back(kBlank);
    t.kind = kind;
    t.stream = stream;
    t.unit = unit >= 0 ? unit + m_unit_offset : unit;
    t.micro_batch = static_cast<int16_t>(mb);
    t.chunk = static_cast<int8_t>(m_chunk);
    t.dtype = m_pdt;
    t.deps.offset = static_cast<uint32_t>(m_p.deps.size());
    t.mem_start.offset = static_cast<uint32_t>(m_p.mem.size());
    t.mem_peak.offset = t.mem_start.offset;
    t.mem_end.offset = t.mem_start.offset;
    m_phase = Phase::Start;
    const auto id = static_cast<int32_t>(m_p.tasks.size() - 1);
    if (!m_host_events->empty() && (stream == Stream::Compute || stream == Stream::Host)) {
        // The end-of-backward callback: the compute stream waits for the last reductions,
        // then their buffers are freed.
        for (int32_t d : *m_host_deps) dep(d);
        *m_host_deps = {-1, -1};
        for (const MemEvent& e : *m_host_events) push(cur().mem_start, e.bytes, e.category, e.timed_after, e.buffer, e.stream);
        m_host_events->clear();
    }
    m_last_on_stream[static_cast<size_t>(stream)] = id;
    if (stream == Stream::Compute) m_last_compute = id;
    return id;
}

void Lowering::collectiveOn(GroupKind kind) {
    const auto k = static_cast<size_t>(kind);
    assert(m_group[k] >= 0 && "the lowering uses a process group it did not create");
    dep(m_last_collective[k]);
    m_last_collective[k] = curId();
    const ProcessGroup& g = m_p.groups[static_cast<size_t>(m_group[k])];
    Task& t = cur();
    t.group = m_group[k];
    t.group_size = g.size;
    t.group_nodes = g.nodes;
}

}  // namespace detail

Lowerer::Lowerer() : m_scratch(std::make_unique<LowerScratch>()) {}
Lowerer::~Lowerer() = default;
Lowerer::Lowerer(Lowerer&&) noexcept = default;
Lowerer& Lowerer::operator=(Lowerer&&) noexcept = default;

Status Lowerer::lower(const Plan& plan, const Mesh& mesh, Program& out) { return lowerStage(plan, mesh, 0, out); }

Status Lowerer::lowerStage(const Plan& plan, const Mesh& mesh, int stage, Program& out) {
    assert(plan.model && "lower() needs a model");
    if (mesh.pp <= 1) {
        detail::Lowering lowering(plan, mesh, out, *m_scratch);
        return lowering.run();
    }
    const int stages = mesh.stages();
    if (stage < 0 || stage >= mesh.pp || mesh.stage_blocks.size() != static_cast<size_t>(stages)) {
        return makeError("pipeline stage " + std::to_string(stage) + " is not one of the mesh's " + std::to_string(mesh.pp));
    }
    LowerScratch& s = *m_scratch;
    if (s.stage_source != plan.model || s.stage_split != mesh.stage_blocks) {
        s.stage_source = plan.model;
        s.stage_split = mesh.stage_blocks;
        s.stage_models.clear();
        int32_t begin = 0;
        for (int i = 0; i < stages; ++i) {
            const int32_t end = begin + mesh.stage_blocks[static_cast<size_t>(i)];
            s.stage_models.push_back(
                std::make_shared<const Model>(pipelineStageModel(*plan.model, begin, end, i == 0, i == stages - 1)));
            begin = end;
        }
    }
    // A stage of the embedding alone, or of the norm and output alone (torchtitan's split gives one
    // when the blocks are few): its root is its only unit, whatever the policy groups blocks into.
    auto stagePlan = [&](int g) {
        Plan p = plan;
        p.model = s.stage_models[static_cast<size_t>(g)];
        if (p.model->blocks.empty()) p.sharding.wrap = WrapPolicy{WrapKind::Whole, 1, 0, {}, {}};
        return p;
    };
    if (mesh.virtual_stages == 1) {
        const Plan stage_plan = stagePlan(stage);
        detail::Lowering lowering(stage_plan, mesh, out, s, stage, plan.model);
        return lowering.run();
    }
    // Rule PP5 (lower_pp.cpp): the rank's stages stage, stage + pp, ... each lowered by its own
    // Lowering into one Program, driven by the rank's schedule.
    const auto v = static_cast<size_t>(mesh.virtual_stages);
    while (m_chunk_scratch.size() < v) m_chunk_scratch.push_back(std::make_unique<LowerScratch>());
    std::vector<Plan> plans;
    plans.reserve(v);
    for (size_t c = 0; c < v; ++c) plans.push_back(stagePlan(mesh.rankStage(stage, static_cast<int>(c))));
    out.clear();
    const std::vector<PipelineStep> steps = pipelineRankSchedule(plan.sharding.pp_schedule, mesh.pp, mesh.virtual_stages,
                                                                 static_cast<int>(plan.training.grad_accum), stage);
    std::vector<std::unique_ptr<detail::Lowering>> chunks;
    int32_t units = 0;
    for (size_t c = 0; c < v; ++c) {
        detail::ChunkContext ctx;
        ctx.chunk = static_cast<int>(c);
        ctx.unit_offset = units;
        ctx.steps = &steps;
        if (c > 0) {
            ctx.host_events = chunks.front()->hostEvents();
            ctx.host_deps = chunks.front()->hostDeps();
        }
        chunks.push_back(std::make_unique<detail::Lowering>(plans[c], mesh, out, *m_chunk_scratch[c],
                                                            mesh.rankStage(stage, static_cast<int>(c)), plan.model, ctx));
        if (auto st = chunks.back()->prepare(); !st) return st;
        units += chunks.back()->unitCount();
    }
    for (const PipelineStep& a : steps) chunks[static_cast<size_t>(a.stage / mesh.pp)]->act(a);
    // torchtitan builds one optimizer per model part (OptimizersContainer) and steps them in turn.
    for (auto& c : chunks) c->finish();
    if (plan.cluster.gpu.host_device) {
        for (Task& t : out.tasks) t.host_blocks = true;
    }
    return Ok{};
}

Status lower(const Plan& plan, const Mesh& mesh, Program& out) {
    Lowerer lowerer;
    return lowerer.lower(plan, mesh, out);
}

}  // namespace shardcast::core
