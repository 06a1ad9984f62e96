#pragma once
// The lowered form of a Plan (DESIGN.md section 2): for one representative rank, the tasks of one
// steady-state training step in the order the host issues them, each on a stream, with its work,
// its cross-stream dependencies and the memory it allocates and frees. The simulator times it;
// the backends execute it. Nothing downstream needs to know FSDP's rules: they are all here.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/units.hpp"

namespace shardcast::core {

// CUDA streams as FSDP2 uses them, plus the host (CPU optimizer under offload).
enum class Stream : uint8_t {
    Compute,          // default stream: forward, backward, recompute, copy-out, optimizer
    AllGatherCopyIn,  // cast / copy of the local shard into the all-gather input
    AllGather,
    ReduceScatter,
    AllReduce,        // HSDP replicate all-reduce, DDP gradient all-reduce
    HostToDevice,     // offload: shard copies to the GPU
    DeviceToHost,     // offload: gradient copies to the host
    Host,             // CPU work (the optimizer step under CPU offload)
    // Pipeline parallelism: P2P with the previous stage (receiving activations, sending input
    // gradients) and with the next one (sending activations, receiving output gradients), each
    // on its own: ProcessGroupNCCL runs a rank pair's P2P on that pair's communicator.
    PipelinePrev,
    PipelineNext,
};
constexpr int kStreamCount = 10;
std::string_view streamName(Stream s);
std::optional<Stream> parseStream(std::string_view name);  // the names streamName gives

enum class TaskKind : uint8_t {
    Forward,
    Backward,
    Recompute,      // activation-checkpointing forward replay inside backward
    CopyIn,         // all-gather copy-in (cast to param_dtype into the flat input)
    AllGather,
    CopyOut,        // split the flat all-gather output into the unsharded parameters
    ReduceScatter,
    AllReduce,
    HostToDevice,
    DeviceToHost,
    Cast,           // dtype conversion of gradients (reduce dtype -> master dtype, no_sync upcast)
    OptimizerStep,
    Send,           // pipeline P2P: a micro-batch's activations to the next stage, or its input
                    // gradient to the previous one (Task::peer)
    Recv,           // pipeline P2P: the matching receive
    ClipGrad,       // clip_grad_norm_: the gradients' norm and their scaling, before the optimizer step
};
constexpr int kTaskKindCount = 15;
// "FWD", "BWD", "RECOMP", "COPYIN", "AG", "COPYOUT", "RS", "AR", "H2D", "D2H", "CAST", "OPT", "SEND", "RECV", "CLIP"
std::string_view taskKindName(TaskKind k);
std::optional<TaskKind> parseTaskKind(std::string_view name);
inline bool isCompute(TaskKind k) {
    return k == TaskKind::Forward || k == TaskKind::Backward || k == TaskKind::Recompute || k == TaskKind::CopyIn ||
           k == TaskKind::CopyOut || k == TaskKind::Cast || k == TaskKind::OptimizerStep || k == TaskKind::ClipGrad;
}
inline bool isCollective(TaskKind k) {
    return k == TaskKind::AllGather || k == TaskKind::ReduceScatter || k == TaskKind::AllReduce;
}
inline bool isP2P(TaskKind k) { return k == TaskKind::Send || k == TaskKind::Recv; }

// One change of memory: +bytes allocates, -bytes frees, in one category.
//
// Buffers. A buffer is a block of bytes of one category that one event allocates and one event
// frees; tensors allocated and freed together are one buffer (a unit's unsharded parameters, the
// activations one segment saves in one micro-batch, a micro-batch's input_ids and labels). Ids
// run 0 .. Program::buffer_count - 1 and each is allocated once per Program. `stream` owns the
// buffer, the same on its free: the stream current on the host when PyTorch allocates it, whose
// pool the caching allocator files the block under (a freed block serves only that stream's
// later allocations). That is the task's own stream, or the compute stream for a buffer the host
// allocates before it switches to the task's stream (FSDP2's reduce-scatter input, allocated in
// foreach_reduce before `with stream(reduce_scatter_stream)`). Scratch (mem_peak) is the task's.
//  - mem_start / mem_end: +bytes allocates `buffer` (its first event); -bytes frees it, with the
//    same size, category and stream, in the same task or a later one.
//  - mem_peak (applied and undone at the task's internal peak): +bytes is a scratch buffer
//    allocated and freed inside the task (its only event); -bytes names a live buffer of which
//    that many bytes are already released at the peak (a backward drops saved activations op by
//    op before its last op runs); the buffer itself is freed by a mem_end event of this task or
//    a later one.
// The step starts from Program::initial (the steady state: sharded parameters, optimizer state,
// module buffers, runtime overhead, which no task allocates) and frees every buffer it allocates,
// so after the last task each category is back at its initial value.
//
// A free the host performs after the buffer's last GPU use has been enqueued (FSDP2 drops the
// previous all-gather output when the next unit waits for its unshard) names that last user in
// `timed_after`: in issue order the free happens with its own task, on the simulated timeline
// when that user ends, since the caching allocator then hands the block to the next allocation
// on the stream.
struct MemEvent {
    int64_t bytes = 0;
    MemCategory category = MemCategory::Temp;
    int32_t timed_after = -1;
    int32_t buffer = -1;
    Stream stream = Stream::Compute;
    bool operator==(const MemEvent&) const = default;
};

// A process group of the mesh. Ranks are laid out rank = r * W + s (r the replica, s the
// position in the shard group). Every rank belongs to one instance of each group; the instance
// holding rank x is `size` ranks spaced `stride` apart:
//   first(x) = x - x mod (size * stride) + x mod stride,  members = first(x) + i * stride, i < size
// Shard: size W, stride 1 ({r*W .. r*W + W-1}); Replicate: size R, stride W ({s, W+s, ...});
// PostForward (reshard_after_forward=k): size k, stride 1, k consecutive ranks inside the shard
// group; World: every rank.
// Tensor: the tp ranks of a 2-D mesh (size tp, stride 1); with tp > 1 the Shard and Replicate
// groups stride over them (Shard: size W, stride tp; Replicate: size R, stride W * tp).
// Pipeline: the pp stages' ranks that hold the same dp and tp position (size pp, stride
// R * W * tp: the stages are the mesh's outermost dimension); the World group is then one stage's
// ranks as far as the collectives go, since every collective stays inside a stage.
enum class GroupKind : uint8_t { World, Shard, Replicate, PostForward, Tensor, Pipeline };
constexpr int kGroupKindCount = 6;
// "world", "shard", "replicate", "post-forward", "tensor", "pipeline"
std::string_view groupKindName(GroupKind k);
std::optional<GroupKind> parseGroupKind(std::string_view name);

struct ProcessGroup {
    GroupKind kind = GroupKind::World;
    int32_t size = 1;    // ranks in each instance
    int32_t stride = 1;  // rank distance between consecutive members
    int32_t nodes = 1;   // the most nodes any instance spans (1: inside one node)
    bool operator==(const ProcessGroup&) const = default;
};

// One kernel a compute task stands for, with its real sizes, so that a backend runs kernels of
// these shapes and the simulator can time op by op. Per micro-batch, in the task's dtype.
//  - Gemm: `batch` independent products C[m, n] = A[m, k] B[k, n]: 2 * m * n * k * batch FLOPs.
//    A linear layer over T tokens: m = T, n = out_features, k = in_features; its backward is
//    dgrad (m = T, n = in, k = out) and, unless the weight is frozen, wgrad (m = out, n = in,
//    k = T). Eager attention: batch = micro_batch * heads GEMMs of [seq, head_dim] x [head_dim,
//    seq] (scores) and [seq, seq] x [seq, head_dim] (values).
//  - Attention / AttentionBackward: a fused (flash) kernel over batch, heads (kv_heads for
//    grouped-query attention), seq (query and key length) and head_dim. FLOPs are those the
//    kernel executes: 4 * batch * heads * seq^2 * head_dim forward and 2.5 times that backward
//    (FlashAttention-2's backward recomputes Q K^T: 5 GEMMs for the forward's 2), halved when
//    `causal` (the masked half is skipped); flash-attention benchmarks/benchmark_flash_attention.py.
//  - Elementwise: a bandwidth-bound kernel moving `bytes` (read + written) and doing `flops`.
//  - TpAllGather / TpReduceScatter / TpAllReduce: a tensor-parallel collective the compute stream
//    waits for (DTensor's redistributions between a sequence-sharded and a replicated activation,
//    or a partial sum): `bytes` is its size S in nccl-tests' sense (the gathered size for
//    all-gather and reduce-scatter, the buffer for all-reduce) on process group `group`
//    (Program::groups; its size and nodes copied for the cost model). No FLOPs. `overlap`: async
//    TP runs it under the matmuls next to it (1: the run of GEMMs after it, which read what it
//    gathers; 2: the run of GEMMs before it, which make what it reduces); 0: on its own.
// A task's FLOPs are the sum of its ops' FLOPs (opFlops); a Linear GEMM over a fraction of the
// tokens (an MoE expert) rounds m to whole tokens.
enum class OpShapeKind : uint8_t { Gemm, Attention, AttentionBackward, Elementwise, TpAllGather, TpReduceScatter, TpAllReduce };
constexpr int kOpShapeKindCount = 7;
// "gemm", "attention", "attention-backward", "elementwise", "tp-all-gather", "tp-reduce-scatter", "tp-all-reduce"
std::string_view opShapeKindName(OpShapeKind k);
inline bool isTpCollective(OpShapeKind k) {
    return k == OpShapeKind::TpAllGather || k == OpShapeKind::TpReduceScatter || k == OpShapeKind::TpAllReduce;
}
// The collective task kind a TP collective op runs as (AllGather, ReduceScatter or AllReduce).
TaskKind tpCollectiveTaskKind(OpShapeKind k);
std::optional<OpShapeKind> parseOpShapeKind(std::string_view name);

struct OpShape {
    OpShapeKind kind = OpShapeKind::Elementwise;
    DType dtype = DType::BF16;
    bool causal = false;             // Attention
    int64_t m = 0, n = 0, k = 0;     // Gemm
    int64_t batch = 0;               // Gemm: products; Attention: sequences
    int32_t heads = 0, kv_heads = 0, head_dim = 0;  // Attention
    int64_t seq = 0;                 // Attention
    int64_t bytes = 0, flops = 0;    // Elementwise; TP collectives: bytes
    int32_t group = -1, group_size = 0, group_nodes = 0;  // TP collectives
    uint8_t overlap = 0;                                  // TP collectives: 0, 1 (next GEMMs), 2 (previous)
    bool operator==(const OpShape&) const = default;
};
int64_t opFlops(const OpShape& op);

struct Span {
    uint32_t offset = 0;
    uint32_t count = 0;
    bool operator==(const Span&) const = default;
};

struct Task {
    TaskKind kind = TaskKind::Forward;
    Stream stream = Stream::Compute;
    int16_t micro_batch = 0;
    int32_t unit = -1;          // index into Program::units, -1 for step-level tasks
    // Work. Compute: flops and the HBM bytes it moves (roofline). Collectives: comm_bytes is the
    // size S in nccl-tests' sense (the gathered size for all-gather and reduce-scatter, the buffer
    // for all-reduce). Copies: comm_bytes is the bytes moved over the link.
    int64_t flops = 0;
    int64_t hbm_bytes = 0;
    int64_t comm_bytes = 0;
    // Collectives: the process group (index into Program::groups; -1 for other tasks) and, copied
    // from it for the cost models, its size and the nodes it spans (1: inside one node).
    int32_t group = -1;
    int32_t group_size = 0;
    int32_t group_nodes = 0;
    // Collectives and copies: the element type moved. Compute tasks: the dtype they compute in
    // (a cast: the dtype it writes; the optimizer step: the master dtype).
    DType dtype = DType::BF16;
    // Send / Recv: the stage exchanged with, relative to this one (+1 the next stage, -1 the
    // previous); `group` is the Pipeline group. 0 for other tasks.
    int8_t peer = 0;
    // Interleaved1F1B: the rank's stage this task belongs to (0 to Program::pp_virtual - 1); its
    // pipeline stage is chunk x pp_size + pp_stage, and a P2P peer's is that +- 1 (the next or
    // previous pipeline rank, wrapping around). 0 for every task otherwise.
    int8_t chunk = 0;
    bool host_blocks = false;   // after issuing this task the host waits for it to finish
    int32_t host_wait = -1;     // before issuing this task the host waits for that earlier task
                                // to finish (FSDP1's all-gather rate limiter)
    Span deps;       // ids of earlier tasks (any stream) that must finish before this one starts
    Span mem_start;  // applied when the task starts
    Span mem_peak;   // applied and undone at the task's internal peak (transient bytes)
    Span mem_end;    // applied when the task ends
    // Compute tasks (Forward, Backward, Recompute, CopyIn, CopyOut, Cast, OptimizerStep): the
    // kernels they stand for, in Program::ops, at least one; other tasks none. Tasks that run
    // the same kernels (a block's forward and its recompute, the next identical block) share
    // one span.
    Span ops;
    bool operator==(const Task&) const = default;
};

// TP collective `op` inside compute task `host`, as a collective task of its own (its kind, dtype,
// size and group; the host's stream, unit and micro-batch), for the backends' collective paths.
Task tpCollectiveTask(const Task& host, const OpShape& op);

// A collective a unit issues: its size S in nccl-tests' sense (as Task::comm_bytes) and its group.
struct UnitCollective {
    int64_t bytes = 0;        // 0: the unit issues no such collective
    int32_t group_size = 0;   // ranks in the group
    int32_t group_nodes = 0;  // nodes the group spans
    bool operator==(const UnitCollective&) const = default;
};

// Per-unit sizes, for reports and for the tools that draw or search over units. The lowering
// fills them from the same figures it emits the tasks with, so a tool that models a unit's
// memory or communication reads them here instead of re-deriving FSDP's rules.
struct UnitInfo {
    std::string name;               // "model.layers.3"; the root unit is "(root)"
    bool is_root = false;
    bool reshard_after_forward = true;
    int32_t blocks = 0;             // transformer blocks inside the unit
    int64_t params = 0;             // elements owned by the unit
    int64_t trainable_params = 0;
    int64_t sharded_bytes = 0;      // per rank, padded, in the master/original dtype
    int64_t unsharded_bytes = 0;    // all-gathered, padded, in param_dtype
    int64_t grad_shard_bytes = 0;   // per rank sharded gradient (padded, master dtype)
    int64_t fwd_flops = 0;          // per micro-batch
    int64_t activation_bytes = 0;   // saved for backward per micro-batch (after checkpointing)

    // Device memory of one unshard, per rank, by phase; the same phases for FSDP1 and FSDP2, so a
    // reader needs no flavour. An unshard is issued (copy-in, all-gather), the compute stream
    // waits for it (FSDP2: the copy-out), the unit computes, then it reshards.
    int64_t unshard_in_flight_bytes = 0;  // from the issue until the wait, once the all-gather has
                                          // run: FSDP2's flat output; FSDP1's unsharded
                                          // FlatParameter (the all-gather writes into it). The
                                          // cast shard the all-gather reads (FSDP2: a copy-in
                                          // temporary, FSDP1: _mp_shard) is freed by then.
    int64_t unshard_wait_bytes = 0;       // when the compute stream takes the unit: FSDP2's flat
                                          // output and unsharded parameters during the copy-out
    int64_t unsharded_param_bytes = 0;    // from the wait until the reshard; 0 when compute reads
                                          // the sharded storage (NO_SHARD without mixed precision)
    int64_t post_forward_shard_bytes = 0; // reshard_after_forward=k: the slice kept between the
                                          // forward's reshard and the backward's all-gather
    int64_t reduce_scatter_input_bytes = 0;  // padded, reduce_dtype: from the reduce-scatter's
                                             // start until the next reduction starts
    int64_t no_sync_grad_bytes = 0;       // unsharded gradients held across micro-batches that
                                          // skip the reduction (no_sync); 0 when all reduce
    UnitCollective all_gather;            // before the forward
    UnitCollective all_gather_bwd;        // before the backward; none when the unit stays unsharded
    UnitCollective reduce_scatter;        // per micro-batch that reduces
    UnitCollective all_reduce;            // HSDP across replicas, or NO_SHARD's gradient all-reduce
    bool operator==(const UnitInfo&) const = default;
};

struct Program {
    std::vector<Task> tasks;        // host issue order; on one stream tasks run in this order
    std::vector<int32_t> deps;      // pool for Task::deps
    std::vector<MemEvent> mem;      // pool for Task::mem_*
    std::vector<OpShape> ops;       // pool for Task::ops
    int32_t buffer_count = 0;       // buffer ids are 0 .. buffer_count - 1
    // The tensors behind a buffer, as PyTorch's caching allocator sees them: a buffer that stands
    // for tensors allocated one by one (a segment's saved activations, op by op in forward order;
    // FSDP2's unsharded parameters, one per parameter; a segment's gradients, op by op) lists their
    // bytes, summing to the buffer's. `buffer_tensors` is empty (every buffer is one tensor) or has
    // one span into `tensor_bytes` per buffer id; an empty span is one tensor. Buffers of the same
    // shape (a repeated block's) share a span.
    std::vector<int64_t> tensor_bytes;
    std::vector<Span> buffer_tensors;
    std::vector<UnitInfo> units;    // forward order; units[0] is the root
    std::vector<ProcessGroup> groups;  // the process groups the collectives run on
    int32_t world_size = 1;         // ranks of the mesh
    int32_t tp_size = 1;            // tensor-parallel ranks sharing each micro-batch's tokens
    int32_t pp_size = 1;            // pipeline stages, each running every micro-batch over its blocks
    int32_t pp_stage = 0;           // the stage this Program is (pp_size > 1): its pipeline rank
    int32_t pp_virtual = 1;         // stages per pipeline rank (Interleaved1F1B; Task::chunk)
    int32_t pipelineStages() const { return pp_size * pp_virtual; }
    // The pipeline stage a task of this Program belongs to (Task::chunk).
    int32_t stageOf(const Task& t) const { return t.chunk * pp_size + pp_stage; }
    CategoryBytes initial{};        // live when the step starts (steady state)
    DType compute_dtype = DType::BF16;
    int micro_batches = 1;
    // A step simulated by its period (sim::Evaluator): the step's micro-batches, more than the
    // Program's. Its last micro-batch then stands for the step's last and is labelled so. 0: the
    // Program is the whole step.
    int step_micro_batches = 0;
    int64_t tokens_per_micro_batch = 0;
    // Per-step sums are doubles: a real plan exceeds int64 (Llama-3.1-405B at 131072 tokens and
    // 64 micro-batches does 2e19 FLOPs per rank and step). Each task's FLOPs fit int64 (limits).
    double model_flops_per_step = 0;     // torchtitan's convention (core/flops.hpp), per rank
    double hardware_flops_per_step = 0;  // FLOPs executed: sum of task FLOPs (recompute counted)
    // Host (pinned CPU) memory per rank under CPU offload.
    int64_t host_param_bytes = 0, host_grad_bytes = 0, host_optimizer_bytes = 0;

    void clear();
    // Tokens one rank trains on in `micro_batches` micro-batches: a tp group shares each
    // micro-batch's tokens, and the pp stages share its work (torchtitan's tokens per second per
    // GPU divides by tp * pp, its non-data-parallel size).
    double rankTokens(double micro_batches_in_step) const {
        return micro_batches_in_step * static_cast<double>(tokens_per_micro_batch) /
               (static_cast<double>(tp_size) * static_cast<double>(pp_size));
    }
    int32_t size() const { return static_cast<int32_t>(tasks.size()); }
    const int32_t* depsBegin(const Task& t) const { return deps.data() + t.deps.offset; }
    const MemEvent* memBegin(Span s) const { return mem.data() + s.offset; }
    const OpShape* opsBegin(const Task& t) const { return ops.data() + t.ops.offset; }
    std::string taskLabel(int32_t id) const;  // "AG layers.3", "BWD (root)"; Interleaved1F1B adds the stage: "RECV act s2 mb1"
    bool operator==(const Program&) const = default;
};

// The ranks of the instance of `program.groups[group]` that holds `rank`, ascending; empty when
// the group or the rank is out of range.
std::vector<int32_t> groupRanks(const Program& program, int32_t group, int32_t rank);

}  // namespace shardcast::core
