#include "core/program/program.hpp"

namespace shardcast::core {
namespace {

// The enum value (of `count` values) whose name is `name`.
template <class E, class NameOf>
std::optional<E> parseByName(std::string_view name, int count, NameOf nameOf) {
    for (int i = 0; i < count; ++i) {
        if (nameOf(static_cast<E>(i)) == name) return static_cast<E>(i);
    }
    return std::nullopt;
}

}  // namespace

std::string_view streamName(Stream s) {
    switch (s) {
        case Stream::Compute: return "compute";
        case Stream::AllGatherCopyIn: return "all-gather copy-in";
        case Stream::AllGather: return "all-gather";
        case Stream::ReduceScatter: return "reduce-scatter";
        case Stream::AllReduce: return "all-reduce";
        case Stream::HostToDevice: return "host-to-device";
        case Stream::DeviceToHost: return "device-to-host";
        case Stream::Host: return "host";
        case Stream::PipelinePrev: return "p2p previous stage";
        case Stream::PipelineNext: return "p2p next stage";
    }
    return "?";
}

std::string_view taskKindName(TaskKind k) {
    switch (k) {
        case TaskKind::Forward: return "FWD";
        case TaskKind::Backward: return "BWD";
        case TaskKind::Recompute: return "RECOMP";
        case TaskKind::CopyIn: return "COPYIN";
        case TaskKind::AllGather: return "AG";
        case TaskKind::CopyOut: return "COPYOUT";
        case TaskKind::ReduceScatter: return "RS";
        case TaskKind::AllReduce: return "AR";
        case TaskKind::HostToDevice: return "H2D";
        case TaskKind::DeviceToHost: return "D2H";
        case TaskKind::Cast: return "CAST";
        case TaskKind::OptimizerStep: return "OPT";
        case TaskKind::Send: return "SEND";
        case TaskKind::Recv: return "RECV";
        case TaskKind::ClipGrad: return "CLIP";
    }
    return "?";
}

std::string_view groupKindName(GroupKind k) {
    switch (k) {
        case GroupKind::World: return "world";
        case GroupKind::Shard: return "shard";
        case GroupKind::Replicate: return "replicate";
        case GroupKind::PostForward: return "post-forward";
        case GroupKind::Tensor: return "tensor";
        case GroupKind::Pipeline: return "pipeline";
    }
    return "?";
}

std::string_view opShapeKindName(OpShapeKind k) {
    switch (k) {
        case OpShapeKind::Gemm: return "gemm";
        case OpShapeKind::Attention: return "attention";
        case OpShapeKind::AttentionBackward: return "attention-backward";
        case OpShapeKind::Elementwise: return "elementwise";
        case OpShapeKind::TpAllGather: return "tp-all-gather";
        case OpShapeKind::TpReduceScatter: return "tp-reduce-scatter";
        case OpShapeKind::TpAllReduce: return "tp-all-reduce";
    }
    return "?";
}

Task tpCollectiveTask(const Task& host, const OpShape& op) {
    Task t = host;
    t.kind = tpCollectiveTaskKind(op.kind);
    t.dtype = op.dtype;
    t.comm_bytes = op.bytes;
    t.group = op.group;
    t.group_size = op.group_size;
    t.group_nodes = op.group_nodes;
    return t;
}

TaskKind tpCollectiveTaskKind(OpShapeKind k) {
    switch (k) {
        case OpShapeKind::TpAllGather: return TaskKind::AllGather;
        case OpShapeKind::TpReduceScatter: return TaskKind::ReduceScatter;
        default: return TaskKind::AllReduce;
    }
}

int64_t opFlops(const OpShape& op) {
    switch (op.kind) {
        case OpShapeKind::Gemm: return 2 * op.m * op.n * op.k * op.batch;
        case OpShapeKind::Attention:
            return 4 * op.batch * op.heads * op.seq * op.seq * op.head_dim / (op.causal ? 2 : 1);
        case OpShapeKind::AttentionBackward:
            return 10 * op.batch * op.heads * op.seq * op.seq * op.head_dim / (op.causal ? 2 : 1);
        case OpShapeKind::Elementwise: return op.flops;
        case OpShapeKind::TpAllGather:
        case OpShapeKind::TpReduceScatter:
        case OpShapeKind::TpAllReduce: return 0;
    }
    return 0;
}

std::optional<Stream> parseStream(std::string_view name) {
    return parseByName<Stream>(name, kStreamCount, streamName);
}
std::optional<TaskKind> parseTaskKind(std::string_view name) {
    return parseByName<TaskKind>(name, kTaskKindCount, taskKindName);
}
std::optional<GroupKind> parseGroupKind(std::string_view name) {
    return parseByName<GroupKind>(name, kGroupKindCount, groupKindName);
}
std::optional<OpShapeKind> parseOpShapeKind(std::string_view name) {
    return parseByName<OpShapeKind>(name, kOpShapeKindCount, opShapeKindName);
}

void Program::clear() {
    tasks.clear();
    deps.clear();
    mem.clear();
    ops.clear();
    buffer_count = 0;
    tensor_bytes.clear();
    buffer_tensors.clear();
    units.clear();
    groups.clear();
    world_size = 1;
    tp_size = 1;
    pp_size = 1;
    pp_stage = 0;
    pp_virtual = 1;
    initial.fill(0);
    micro_batches = 1;
    step_micro_batches = 0;
    tokens_per_micro_batch = 0;
    model_flops_per_step = 0;
    hardware_flops_per_step = 0;
    host_param_bytes = host_grad_bytes = host_optimizer_bytes = 0;
}

std::string Program::taskLabel(int32_t id) const {
    const Task& t = tasks[static_cast<size_t>(id)];
    std::string label(taskKindName(t.kind));
    if (t.unit >= 0) {
        std::string_view name = units[static_cast<size_t>(t.unit)].name;
        // "model.layers.3" reads better as "layers.3" in a trace lane.
        if (name.rfind("model.", 0) == 0) name.remove_prefix(6);
        label += ' ';
        label += name;
    }
    if (isP2P(t.kind)) {
        // Activations go forward (to the next stage), input gradients backward.
        const bool activations = (t.kind == TaskKind::Send) == (t.peer > 0);
        label += activations ? " act" : " grad";
    }
    // Interleaved1F1B: which of the rank's stages the task belongs to.
    if (pp_virtual > 1) label += " s" + std::to_string(stageOf(t));
    if (micro_batches > 1) {
        const bool step_last = step_micro_batches > micro_batches && t.micro_batch == micro_batches - 1;
        label += " mb" + std::to_string(step_last ? step_micro_batches - 1 : int{t.micro_batch});
    }
    return label;
}

std::vector<int32_t> groupRanks(const Program& program, int32_t group, int32_t rank) {
    std::vector<int32_t> ranks;
    if (group < 0 || static_cast<size_t>(group) >= program.groups.size() || rank < 0 || rank >= program.world_size)
        return ranks;
    const ProcessGroup& g = program.groups[static_cast<size_t>(group)];
    if (g.size <= 0 || g.stride <= 0) return ranks;
    const int64_t span = int64_t{g.size} * g.stride;
    const int64_t first = rank - rank % span + rank % g.stride;
    ranks.reserve(static_cast<size_t>(g.size));
    for (int64_t i = 0; i < g.size; ++i) ranks.push_back(static_cast<int32_t>(first + i * g.stride));
    return ranks;
}

}  // namespace shardcast::core
