#pragma once
// Private to the lowering (core/lower*.cpp). One class, `Lowering`, turns a validated Plan into a
// Program; its methods are spread over four files so that each FSDP rule (DESIGN.md section 3)
// reads in one named place:
//   lower.cpp           the driver, plan-wide settings, the Program header, emission primitives
//   lower_sizes.cpp     unit order and per-unit sizes: rules 1-3 and 9, FSDP1's FlatParameter, rule 5
//   lower_segments.cpp  op costs, segments, activation memory and checkpointing, hook order
//   lower_schedule.cpp  forward, backward, unshard, reshard, reduce, offload, optimizer: rules 2-11
//                       and FSDP1's schedule differences
//   lower_tp.cpp        tensor parallelism under FSDP: rules TP1-TP5 (its header)
//   lower_pp.cpp        pipeline parallelism: a stage's schedule, its P2P and FSDP inside a stage:
//                       rules PP1-PP4 (its header)
//
// Where each rule is:
//   1  padded dim-0 shards; optimizer state on unpadded rows   addParamFsdp2
//   2  one all-gather per unshard after a cast copy-in          issueUnshard
//   3  unsharded parameters allocated at copy-out               waitUnshard
//   4  a flat output lives until the next unit's wait           waitUnshard, postForward
//   5  reshard_after_forward true / false / k                   reshardAfterForwardPerUnit, postForward, freeUnsharded
//   6  pre-backward unshard, prefetch in reverse order          preBackward, prefetchAfter
//   7  post-backward reduce-scatter (+ HSDP all-reduce, cast)   postBackward
//   8  no_sync keeps unsharded gradients                        postBackward (no sync), backwardSegment
//   9  optimizer state and step                                 addParam*, fillProgramHeader, optimizerStep
//   10 CPU offload                                              issueUnshard (H2D), postBackward (D2H), optimizerStep
//   11 the step's first all-gather follows the optimizer        by construction (lower_schedule.cpp)
//   FSDP1: FlatParameter sizes                                  addParamToFlatParameter, fsdp1FlatParameterSizes
//          rate limiter (limit_all_gathers)                     fsdp1RateLimit
//          all-gather into the FlatParameter, no copy-out       issueUnshard, waitUnshard
//          prefetch depth 1, BACKWARD_PRE/POST, forward_prefetch  preForward, preBackward, prefetchAfter, postBackward
//   NO_SHARD (DDP)                                              addParamNoShard, castCopy, postBackwardNoShard
//   TP5 the embedding's whole-vocabulary gradient               vocabGradExtra, redistributeVocabGrad
//   PP1 parameters kept unsharded after forward under pp        reshardAfterForwardPerUnit
//   PP2 the stage's schedule, micro-batches held (slots)        pipelineRankSchedule, act, configure, slotOf
//   PP5 Interleaved1F1B: several stages per rank, UNSHARD,      Lowerer::lowerStage (lower_pp.cpp), unshardStage,
//       RESHARD, REDUCE_GRAD per stage                          reshardStage, reduceGradients
//   PP3 no gradient sync or reshard in backward; one reduction  syncsNow, postBackward, reduceGradients
//   PP4 P2P sends and receives between stages                   receive, send
//   G1 frozen parameters (LoRA): what autograd saves and         requiresGradCosts (lower_segments.cpp),
//      computes when only some parameters need gradients         pushBackwardOps
//   F8 fp8 all-gather (torchao float8): fp8 weights gathered      addParamFsdp2, float8Costs, pushForwardOps,
//      and held, fp8 GEMMs and casts, the amax pass               pushBackwardOps, optimizerStep
//   T1 a tied LM head's weight gradient held until the           tiedHeadGrad, segmentCosts, backwardSegment
//      embedding's backward adds its own to it
//   C1 under checkpointing, transformers 4.5x's boolean mask kept   checkpointKeepsMask, splitIntoSegments
//      by every block's checkpoint until the first block's backward
//   L1-L4 memory around the step: init, summon_full_params,       lifecycleMemory (lower_lifecycle.cpp,
//      full and sharded state dicts                               core/lower/lifecycle.hpp)
#include <array>
#include <cassert>
#include <climits>
#include <cstdint>
#include <optional>
#include <vector>

#include "core/lower/lower.hpp"
#include "core/plan/wrap.hpp"

namespace shardcast::core {
namespace detail {

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
    int64_t float8_shard_elems = 0;  // fp8 all-gather: its Float8Linear weights' unpadded shard elements
    int64_t first_op = INT_MAX, last_op = -1;  // forward op range (model op indices)
    Span param_tensors;            // FSDP2: the unsharded parameters, one tensor each (Program::tensor_bytes)
    int32_t blocks = 0;
    bool reshard_after_forward = true;
    // TP5: elements by which the vocab-parallel embedding's whole-vocabulary gradient exceeds its
    // local rows ((tp - 1) x them); 0 without tensor parallelism or such an embedding.
    int64_t vocab_grad_extra = 0;
};

// A run of ops of one unit inside one block: the granularity of forward, recompute and backward
// tasks. Bytes are per micro-batch.
struct Segment {
    int32_t unit = 0;          // program unit index
    bool checkpointed = false; // the enclosing block runs under checkpoint_wrapper (full, layer, op)
    bool op_sac = false;       // checkpointed under torchtitan's per-op SAC (op, or an op block)
    int64_t fwd_flops = 0, bwd_flops = 0, fwd_hbm = 0, bwd_hbm = 0;
    // What a recompute runs: the whole forward, or under per-op SAC the ops whose outputs were not
    // kept (rec_weight_bytes: the parameters those ops read).
    int64_t rec_flops = 0, rec_hbm = 0, rec_weight_bytes = 0;
    int64_t sac_kept = 0;      // per-op SAC: op outputs kept from the forward until the recompute
    int64_t saved = 0;         // Activation bytes held after the forward
    int64_t saved_full = 0;    // what a recompute re-creates (checkpointed segments)
    int64_t fwd_peak_act = 0, fwd_peak_temp = 0;     // forward transient (no checkpointing)
    int64_t ckpt_peak_temp = 0;                      // forward transient under checkpointing
    int64_t bwd_peak_grad = 0, bwd_peak_temp = 0, bwd_peak_freed = 0;
    int64_t grad_bytes = 0;    // gradients (param_dtype) produced by this segment
    // Rule T1: the tied head's weight gradient this segment's backward makes and autograd holds
    // (bytes), and whether its backward (the embedding's) frees it.
    int64_t tied_held = 0;
    bool tied_frees = false;
    int64_t weight_bytes = 0;  // unsharded parameters (param_dtype) the segment's ops read
    int64_t op_begin = 0, op_end = 0;  // range in LowerScratch::active
    Span fwd_ops, rec_ops, bwd_ops;  // kernel shapes in Program::ops (forward; recompute; backward)
    // The tensors behind its buffers (Program::tensor_bytes), op by op in forward order: what the
    // forward saves unless checkpointed (saved_full), what per-op SAC keeps, the gradients.
    Span saved_tensors, kept_tensors, grad_tensors;
    // The tensors behind the transient peaks: the forward's saved tensors so far and the peak
    // op's temporaries (fwd_peak_act, fwd_peak_temp), the checkpointed forward's (ckpt_peak_temp),
    // the backward's gradients so far and the peak op's temporaries (bwd_peak_grad, bwd_peak_temp).
    Span fwd_peak_act_tensors, fwd_peak_temp_tensors, ckpt_peak_tensors, bwd_peak_grad_tensors, bwd_peak_temp_tensors;
    int64_t fwd_peak_op = -1, ckpt_peak_op = -1, bwd_peak_op = -1;  // in LowerScratch::active
};

// The forward schedule: a unit's pre-forward hook, a segment, a unit's post-forward hook.
// Backward walks it in reverse (a post-forward hook position runs the pre-backward hook).
enum class ItemKind : uint8_t { Pre, Seg, Post };
struct Item {
    ItemKind kind;
    int32_t index;  // unit (Pre/Post) or segment
};

// A buffer the lowering has allocated (MemEvent::buffer) and will free: what the free repeats.
struct BufferRef {
    int32_t id = -1;  // -1: nothing allocated (zero bytes) or already freed
    int64_t bytes = 0;
    MemCategory category = MemCategory::Temp;
    Stream stream = Stream::Compute;
    bool live() const { return id >= 0; }
};

// What the schedule has done to a unit so far in the step.
struct UnitState {
    bool unsharded = false;     // unsharded parameters allocated
    bool ag_pending = false;    // all-gather issued, not yet waited for
    bool post_fwd_shard = false;  // reshard_after_forward=k: the 1/k slice is held
    bool acc_live = false;      // no_sync: gradients kept across micro-batches
    bool sharded_grad = false;  // sharded gradient exists (accumulate into it)
    int32_t ag_task = -1;
    int32_t copyout_task = -1;
    int32_t pre_backward_mb = -1;  // the micro-batch whose pre-backward hook has run last
    int64_t grads_live = 0;     // UnshardedGrad bytes held
    int64_t acc_bytes = 0;      // no_sync accumulated gradient bytes
    // Buffers held for the unit.
    BufferRef unsharded_buf;    // unsharded parameters (FSDP1: the unsharded FlatParameter)
    BufferRef flat_buf;         // FSDP2 all-gather output
    BufferRef post_fwd_shard_buf;  // reshard_after_forward=k: the 1/k slice
    BufferRef acc_buf;          // no_sync: gradients upcast to reduce_dtype
    BufferRef sharded_grad_buf; // the sharded gradient kept until zero_grad
    int32_t grads_head = -1;    // segment whose gradient buffer was kept last (list by Segment index)
};

// What the unit sizes read of a parameter, taken once per model (Param keeps its shape on the heap).
struct ParamShape {
    int32_t module = 0;
    std::optional<DType> dtype;  // unset: the training's master dtype
    bool float8 = false;         // a Float8Linear weight (core::float8Weights): fp8 all-gather gathers it in fp8
    int64_t numel = 0, dim0 = 1, row = 1;  // Param::numel(), dim0(), rowNumel()
};

// Costs of one op for this plan's tokens and dtypes (bytes and FLOPs per micro-batch).
inline constexpr uint8_t kInputGrad = 1, kWeightGrad = 2;

struct OpCost {
    int64_t saved = 0, temp = 0, bwd_temp = 0, flops = 0, bwd_flops = 0, io = 0, io_bwd = 0;
    // temp and bwd_temp as PyTorch allocates them: an activation-dtype tensor, then `*_f32_tensors`
    // equal fp32 tensors (Op::temp_f32_tensors).
    int64_t temp_act = 0, bwd_temp_act = 0;
    int16_t temp_f32_tensors = 1, bwd_temp_f32_tensors = 1;
    int64_t out = 0;  // output bytes per-op SAC keeps when it saves this op (mm, flash attention)
    // A Float8Linear under fp8 all-gather (rule F8): its GEMMs in fp8, and the casts' bytes (also in
    // io and io_bwd) with their kernels.
    bool float8 = false;
    int64_t cast_fwd = 0, cast_bwd_grad = 0, cast_bwd_input = 0, cast_bwd_weight = 0;
    // Float8 tensor parallelism (rule F8-TP): the all-gather before this linear moves fp8, and the
    // casts before it (forward: cast_fwd on a colwise run's input shard; backward: a rowwise
    // linear's cast_bwd_grad on the gradient's shard and cast_bwd_weight) run before the all-gather.
    bool float8_tp = false;
};

}  // namespace detail

// Scratch vectors of a lowering, kept between calls so that lowering many plans allocates little.
struct LowerScratch {
    UnitAssignment ua;
    std::vector<int32_t> pidx;           // UnitAssignment index -> program unit index
    std::vector<int32_t> order;          // program unit index -> UnitAssignment index
    std::vector<int32_t> parent;         // program unit -> enclosing program unit
    std::vector<detail::UnitSizes> us;   // per program unit
    std::vector<detail::UnitState> st;   // per program unit
    std::vector<detail::Segment> segs;
    std::vector<detail::Item> items;
    std::vector<int32_t> bwd_order, bwd_pos;  // units in pre-backward order, and each one's position
    std::vector<int32_t> active;         // active op indices, forward order
    std::vector<int64_t> op_grad_elems;  // per model op: gradient elements produced in its backward
    std::vector<int64_t> op_weight_elems;  // per model op: parameter elements its module reads
    bool grads_all_trainable = false;    // op_grad_elems holds op_weight_elems (no parameter frozen)
    bool any_frozen = false;             // some parameter is frozen (training.frozen, LoRA)
    // Rule G1, when any parameter is frozen: per active op, kInputGrad if its input requires grad,
    // kWeightGrad if its own weights do (an op with neither has no grad_fn: it saves nothing and
    // has no backward); and per model op whether the input tensor it heads is saved already.
    std::vector<uint8_t> op_grad;
    std::vector<uint8_t> input_saved;
    std::vector<int32_t> active_pos;     // per model op: its index in `active`, -1 when inactive
    std::vector<uint8_t> sac_keep;       // per active op: per-op SAC keeps its output (no recompute)
    // Rule T1: the tied LM head and the embedding whose weight it reads (active indices, -1: the
    // model has no tied head, or the weight is frozen), the head's weight gradient (param_dtype
    // bytes), and that gradient while autograd holds it in the current micro-batch's backward.
    int32_t tied_head_ai = -1, tied_embed_ai = -1;
    int64_t tied_grad_bytes = 0;
    detail::BufferRef tied_held;
    std::vector<MemEvent> host_pending;  // host-side frees applied at the next task's start
    // Per segment, in the current micro-batch: the activations its forward saved and its recompute
    // re-created; the gradients its backward produced and the next older gradient buffer of the
    // same unit (-1: none), a list a unit frees when it reduces.
    // seg_saved and seg_kept hold one entry per segment and pipeline micro-batch slot
    // (Lowering::slotOf): a pipeline stage holds several micro-batches' activations at once.
    std::vector<detail::BufferRef> seg_saved, seg_recomputed, seg_grad, seg_kept;
    std::vector<int32_t> seg_grad_next;
    std::vector<int32_t> free_queue;     // FSDP1 rate limiter: tasks whose end frees a unit
    // Temporaries of orderUnits(), unitSizes() and splitIntoSegments().
    std::vector<int32_t> last_op_of_module, depth, chain, unit_last_op;
    std::vector<int64_t> first_op_of_module, unit_first_op, module_params, module_trainable, fsdp1_flat,
        fsdp1_trainable;
    std::vector<uint8_t> frozen;         // per parameter
    std::vector<uint8_t> block_split;    // per block (Model::blocks): the root of another unit lies inside it
    std::vector<int32_t> param_unit;     // per parameter: its program unit
    std::vector<int64_t> param_unsharded_bytes;  // FSDP2, per parameter: its unsharded tensor
    // `active`, first_op_of_module and last_op_of_module depend only on the model and the op
    // variants the plan selects; they are kept while the next plan has the same model object and
    // variant bits (plans of one search or sweep), skipping the walk over every op. Holding the
    // pointer keeps the model alive, so its address cannot be reused; a Plan's model is immutable
    // (shared_ptr<const Model>). Likewise the model FLOPs per token for one sequence length.
    std::shared_ptr<const Model> active_model;
    std::array<uint8_t, 3> active_bits{};  // attention, kernel and norm variant bits
    // Kept with `active` too, as they depend only on the model and the active ops: per module its
    // enclosing block (-1: none) and per block module its index in Model::blocks; per active op
    // its module, block and cost class (Op is large: reading them here keeps the walks over
    // the active ops in cache); per parameter its shape and the model op whose backward makes
    // its gradient (-1: none); op_weight_elems.
    std::vector<int32_t> block_of, block_index;
    std::vector<int32_t> active_module, active_block, active_class;
    // Per active op, equal for two ops exactly when their cost class (not -1) and weight elements
    // are: with no parameter frozen, ops of equal signature cost the same (sameAsPrevious).
    std::vector<int32_t> active_signature;
    // Where each run of consecutive active ops of one block (outside every block: of one module)
    // starts, then active.size().
    std::vector<int32_t> block_runs;
    std::vector<detail::ParamShape> param_shapes;
    std::vector<int32_t> param_grad_op;
    // Per parameter, equal for two parameters exactly when their dim-0, row size and dtype are
    // and both get a gradient or neither does (unitSizes copies the sums of a repeated run).
    std::vector<int32_t> param_signature;
    // op_cost's inputs besides the frozen flags: it is kept while they repeat and no op is frozen.
    struct OpCostKey {
        std::shared_ptr<const Model> model;
        std::array<uint8_t, 3> bits{};
        int64_t tokens = 0, seq = 0;
        DType pdt = DType::BF16;
        ModelImpl impl = ModelImpl::Hf;
        HfMask hf_mask = HfMask::V5;
        KernelImpl kernels = KernelImpl::Eager;
        int tp = 1;
        bool sp = true, lp = true;
        AllGatherDtype all_gather = AllGatherDtype::Param;
        bool operator==(const OpCostKey&) const = default;
    };
    OpCostKey op_cost_key;
    std::vector<uint8_t> module_float8;  // per module: it holds a Float8Linear weight (with the active ops)
    // Tensor parallelism: the model's ops as one tp rank sees them (tpLocalOp), kept per model and
    // TP settings (a pipeline's stages are models of their own, lowered in turn: a few entries,
    // the oldest replaced).
    struct TpKey {
        std::shared_ptr<const Model> model;
        int tp = 1;
        bool sp = true, lp = true;
        bool operator==(const TpKey&) const = default;
    };
    struct TpOps {
        TpKey key;
        std::vector<Op> ops;
    };
    static constexpr size_t kTpCacheEntries = 32;
    std::vector<TpOps> tp_cache;
    size_t tp_next = 0;                      // the entry replaced next once the cache is full
    const std::vector<Op>* tp_ops = nullptr;  // this lowering's (tpLocalOps)
    int active_tp = 1;  // the tp the parameter shapes of activeOpTables were taken for
    std::shared_ptr<const Model> flops_model;
    int64_t flops_seq = -1;
    double flops_per_token = 0;
    std::vector<uint32_t> unit_tensor_count;  // per program unit: its parameters
    std::vector<detail::OpCost> op_cost;     // per active op (index into active)
    std::vector<detail::OpCost> class_cost;  // per Op::cost_class
    std::vector<uint8_t> class_done;
    // Pipeline stages' models (pipelineStageModel), kept while the model and the split repeat.
    std::shared_ptr<const Model> stage_source;
    std::vector<int> stage_split;
    std::vector<std::shared_ptr<const Model>> stage_models;
    std::vector<PipelineStep> pipeline_steps;  // the rank's schedule (pp > 1), made by configure()
};

namespace detail {

// The op as one of `tp` tensor-parallel ranks runs it (lower_tp.cpp, rule TP2).
Op tpLocalOp(const Op& op, int tp, bool sp, bool lp);

// Interleaved1F1B (rule PP5): one Lowering per stage of the rank, all writing into one Program.
// `chunk` is the stage's place on its rank (Task::chunk), `unit_offset` the Program units the
// rank's earlier stages hold; the end-of-backward frees and waits go through the first stage's
// Lowering, so that the next compute task of any stage applies them, as one host thread does.
struct ChunkContext {
    int chunk = 0;
    int32_t unit_offset = 0;
    std::vector<MemEvent>* host_events = nullptr;  // nullptr: the Lowering's own
    std::array<int32_t, 2>* host_deps = nullptr;
    const std::vector<PipelineStep>* steps = nullptr;  // the rank's schedule (nullptr: the Lowering makes it)
};

class Lowering {
public:
    // `stage`: the pipeline stage `plan` (whose model is that stage's) is lowered for, and
    // `full_model` the whole model (its FLOPs per token); pp 1: stage 0 and plan's model.
    Lowering(const Plan& plan, const Mesh& mesh, Program& out, LowerScratch& scratch, int stage = 0,
             std::shared_ptr<const Model> full_model = nullptr, const ChunkContext& chunk = {});
    Status run();
    // Interleaved1F1B, driven stage by stage over one Program (Lowerer::lowerStage): prepare()
    // appends the stage's units and starting memory, act() lowers one action of the rank's
    // schedule that names this stage, finish() its optimizer step.
    Status prepare();
    void act(const PipelineStep& step);
    void finish() { optimizerStep(); }
    int32_t unitCount() const { return static_cast<int32_t>(m_s.us.size()); }
    std::vector<MemEvent>* hostEvents() { return m_host_events; }
    std::array<int32_t, 2>* hostDeps() { return m_host_deps; }

private:
    enum class At : uint8_t { Start, End };  // a memory event applies when the task starts or ends

    // lower.cpp: plan-wide settings and the Program header.
    void configure();
    void fillProgramHeader();

    // lower_sizes.cpp
    void orderUnits();
    Status findFrozenParams();
    void unitSizes();
    void activeOpTables();
    void addParamNoShard(UnitSizes& us, const ParamShape& prm, bool trainable);
    int64_t addParamFsdp2(UnitSizes& us, const ParamShape& prm, bool trainable);
    void addParamToFlatParameter(int32_t unit, const ParamShape& prm, bool trainable);
    void fsdp1FlatParameterSizes();
    void unitBufferTable(int32_t u, UnitInfo& info) const;
    void unshardedParamTensors();
    void reshardAfterForwardPerUnit();

    // lower_segments.cpp
    void buildSegments();
    void splitIntoSegments();
    void opCosts();
    void requiresGradCosts();
    void tiedHeadGrad();
    void float8Costs();
    bool sameAsPrevious(size_t si) const;
    void segmentCosts(Segment& seg);
    void segmentTensors(Segment& seg);
    void segmentOps(Segment& seg);
    int64_t linearRows(const Op& op) const;
    void pushForwardOps(const Op& op, const OpCost& c);
    void pushBackwardOps(const Op& op, const OpCost& c, uint8_t grad);
    void pushGemm(int64_t m, int64_t n, int64_t k, int64_t batch, std::optional<DType> dtype = std::nullopt);
    void pushAttention(OpShapeKind kind, const Op& op);
    Span pushElementwise(int64_t bytes, int64_t flops, DType dtype);
    void pushEagerKernels(int64_t bytes, int64_t flops, int kernels);
    void buildItems();
    int64_t elementBytes(const Coef& act, const Coef& f32, const Coef& u8, const Coef& i64) const;

    // lower_tp.cpp
    void tpLocalOps();
    void vocabGradExtra();
    void redistributeVocabGrad(int32_t u, int mb);
    void tpBefore(int64_t ai, bool backward);
    void tpAfter(int64_t ai, bool backward);
    static constexpr uint8_t kOverlapNext = 1, kOverlapPrevious = 2;  // OpShape::overlap under async TP
    void pushTpCollective(OpShapeKind kind, int64_t bytes, uint8_t overlap = 0);
    int64_t vocabRows(const Op& op) const;
    bool checkpointKeepsMask() const;
    // Active op `ai` as this rank runs it: the model's, or its TP-local view.
    const Op& opAt(int64_t ai) const {
        const auto oi = static_cast<size_t>(m_s.active[static_cast<size_t>(ai)]);
        return m_tp > 1 ? (*m_s.tp_ops)[oi] : m_model.ops[oi];
    }
    // Whether active op `ai` is the first colwise linear of a run (q of q/k/v, gate of gate/up):
    // the one whose input the run's all-gather brings (rules TP3, F8-TP).
    bool startsColwiseRun(int64_t ai) const {
        return opAt(ai).tp == TpRole::Colwise && (ai == 0 || opAt(ai - 1).tp != TpRole::Colwise);
    }
    // The gradients active op `ai` computes (rule G1): both unless parameters are frozen.
    uint8_t opGradBits(int64_t ai) const {
        return m_s.any_frozen ? m_s.op_grad[static_cast<size_t>(ai)] : kInputGrad | kWeightGrad;
    }

    // lower_pp.cpp: pipeline parallelism.
    void pipelineStep();
    void unshardStage();
    void reshardStage();
    void waitStageUnshards(int mb, bool backward);
    void receive(int mb, bool backward);
    void send(int mb, bool backward);
    void reduceGradients();
    int64_t stageBoundaryBytes() const;
    // The micro-batch slot of `mb`: a stage holds at most m_slots micro-batches between their
    // forward and their backward, consecutive ones, so mb mod m_slots tells them apart.
    size_t slotOf(int32_t si, int mb) const {
        return static_cast<size_t>(si) + m_s.segs.size() * static_cast<size_t>(mb % m_slots);
    }
    // Whether this micro-batch's post-backward reduces (rule 8, and PP3: a pipeline stage reduces
    // once, after its last backward).
    bool syncsNow(int mb) const {
        if (m_pp > 1) return m_final_reduce;
        return !m_tr.no_sync || mb == m_tr.grad_accum - 1;
    }

    // lower_schedule.cpp: the step.
    void forwardPass(int mb);
    void preForward(int32_t u, int mb);
    void forwardSegment(int32_t si, int mb, bool first);
    void postForward(int32_t u);
    void backwardPass(int mb);
    void preBackward(int32_t u, int mb);
    void prefetchAfter(int32_t u, int mb);
    void backwardSegment(int32_t si, int mb);
    void keepGrad(int32_t u, int32_t si, BufferRef grad);
    void fileGradsAsUnsharded(int32_t u);
    void releaseGrads(At at, int32_t u);
    void postBackward(int32_t u, int mb);
    void postBackwardNoShard(int32_t u, int mb, bool sync, int32_t producer);
    void endOfBackward(int mb);
    void optimizerStep();
    // Unshard and reshard.
    void issueUnshard(int32_t u, int mb, bool backward);
    int32_t fsdp1RateLimit();
    void waitUnshard(int32_t u, int mb, bool backward);
    void castCopy(int32_t u, int mb);
    void freeUnsharded(int32_t u, bool count_mode);
    void computeTask(TaskKind kind, int32_t unit, int mb);
    bool gathers(int32_t u) const { return m_sharded && m_s.us[u].first_op != INT_MAX; }
    int postForwardK() const {
        return m_sh.reshard_after_forward == ReshardMode::Count ? m_sh.reshard_after_forward_k : 0;
    }

    // lower.cpp: emission primitives. A task's memory events are added right after it, in the
    // order start, peak, end (each span is contiguous in Program::mem).
    // Defined here so that the schedule's files inline them.
    int32_t newTask(TaskKind kind, Stream stream, int32_t unit, int mb);
    Task& cur() { return m_p.tasks.back(); }
    int32_t curId() const { return static_cast<int32_t>(m_p.tasks.size() - 1); }
    void dep(int32_t id) {
        if (id < 0 || id == curId()) return;
        m_p.deps.push_back(id);
        ++cur().deps.count;
    }
    // Written in place (no temporary copied in: see newTask).
    void push(Span& span, int64_t bytes, MemCategory c, int32_t timed_after, int32_t buffer, Stream stream) {
        MemEvent& e = m_p.mem.emplace_back();
        e.bytes = bytes;
        e.category = c;
        e.timed_after = timed_after;
        e.buffer = buffer;
        e.stream = stream;
        if (span.count == 0) span.offset = static_cast<uint32_t>(m_p.mem.size() - 1);
        ++span.count;
    }
    // Memory events of the current task, when it starts or when it ends (MemEvent's contract).
    Span& spanAt(At at) {
        if (at == At::Start) {
            assert(m_phase == Phase::Start);
            return cur().mem_start;
        }
        m_phase = Phase::End;
        return cur().mem_end;
    }
    // A new buffer owned by the current task's stream; nothing for zero bytes.
    // `tensors`: the tensors PyTorch allocates one by one for it (Program::buffer_tensors);
    // empty: one tensor.
    BufferRef alloc(At at, MemCategory c, int64_t bytes, Span tensors = {}) {
        return allocOn(cur().stream, at, c, bytes, tensors);
    }
    // A new buffer owned by `stream`: the current task's, or the compute stream when PyTorch
    // allocates it before switching to the task's stream (MemEvent's contract).
    BufferRef allocOn(Stream stream, At at, MemCategory c, int64_t bytes, Span tensors = {}) {
        if (bytes == 0) return {};
        assert(bytes > 0);
        assert((stream == cur().stream || stream == Stream::Compute) && "an allocation's stream is its task's or the compute stream");
        m_p.buffer_tensors.push_back(tensors);
        const BufferRef b{m_p.buffer_count++, bytes, c, stream};
        push(spanAt(at), bytes, c, -1, b.id, b.stream);
        return b;
    }
    // Frees `b` (if live) and forgets it.
    void release(At at, BufferRef& b, int32_t timed_after = -1) {
        if (!b.live()) return;
        push(spanAt(at), -b.bytes, b.category, timed_after, b.id, b.stream);
        b = {};
    }
    // Transient at the task's peak: a scratch buffer allocated and freed inside the task.
    void peakScratch(MemCategory c, int64_t bytes, Span tensors = {}) {
        if (bytes == 0) return;
        assert(m_phase != Phase::End);
        m_phase = Phase::Peak;
        m_p.buffer_tensors.push_back(tensors);
        push(cur().mem_peak, bytes, c, -1, m_p.buffer_count++, cur().stream);
    }
    // Transient at the task's peak: `bytes` of the live buffer `b` are already released.
    void peakReleased(const BufferRef& b, int64_t bytes) {
        if (bytes == 0) return;
        assert(b.live() && bytes <= b.bytes);
        assert(m_phase != Phase::End);
        m_phase = Phase::Peak;
        push(cur().mem_peak, -bytes, b.category, -1, b.id, b.stream);
    }
    // Freed by the host at the start of the next compute (or host) task.
    void releaseByHost(BufferRef& b) {
        if (!b.live()) return;
        m_host_events->push_back(MemEvent{-b.bytes, b.category, -1, b.id, b.stream});
        b = {};
    }
    // The Program's entry for unit `u` of this Lowering (offset by the rank's earlier stages).
    UnitInfo& unitInfo(int32_t u) { return m_p.units[static_cast<size_t>(u + m_unit_offset)]; }

    // Makes the current task a collective on the process group of that kind (Program::groups).
    // One NCCL communicator runs its collectives in issue order on one internal stream, so an
    // all-gather issued after a reduce-scatter on the same process group waits for it. This is
    // why FSDP needs backward prefetch: without it, unit i's all-gather queues behind unit i+1's
    // reduce-scatter, which waits for unit i+1's backward.
    void collectiveOn(GroupKind kind);
    void addGroup(GroupKind kind, int64_t size, int64_t stride);

    const Plan& m_plan;
    const Model& m_model;
    const TrainingSpec& m_tr;
    const ShardingSpec& m_sh;
    Mesh m_mesh;
    Program& m_p;
    LowerScratch& m_s;

    // Plan-wide settings (configure()). W and R as in DESIGN.md: shard and replicate group sizes.
    int64_t m_W = 1, m_R = 1, m_tokens = 0, m_seq = 0;
    int64_t m_tp = 1;            // tensor-parallel ranks (Mesh::tp)
    bool m_sp = true, m_lp = true;  // sequence parallelism, loss parallelism (with m_tp > 1)
    DType m_pdt = DType::BF16;     // param_dtype: unsharded parameters, activations, local grads
    DType m_rdt = DType::F32;      // reduce_dtype
    DType m_master = DType::F32;   // sharded parameters, sharded grads, optimizer state
    bool m_fsdp1 = false, m_sharded = true, m_mp = false, m_offload = false;
    // torch.compile: consecutive elementwise kernels of one op sequence are one fused kernel;
    // m_chain_from is the first index of Program::ops the current sequence may fuse into.
    bool m_compile = false;
    size_t m_chain_from = 0;
    std::array<int32_t, kGroupKindCount> m_group{};  // GroupKind -> index into Program::groups, -1: none

    // Emission state.
    enum class Phase : uint8_t { Start, Peak, End } m_phase = Phase::Start;
    int32_t m_saved_flat = -1;             // FSDP2: unit whose flat output is kept in all_gather_state
    int32_t m_ag_wait = -1;                // copy-out the all-gather streams wait on
    BufferRef m_pending_rs;                // reduce-scatter input awaiting the next reduce
    BufferRef m_vocab_copy;                // TP5: the embedding gradient's local rows, until the copy-in
    std::vector<BufferRef> m_inputs;       // per micro-batch slot: its input_ids and labels
    int32_t m_pending_compute_dep = -1;    // FSDP1: the compute stream waits on this all-gather
    std::array<int32_t, kStreamCount> m_last_on_stream{};
    std::array<int32_t, kGroupKindCount> m_last_collective{};  // per GroupKind
    int32_t m_last_compute = -1;
    std::array<int32_t, 2> m_own_pending_deps{-1, -1};
    // What the end-of-backward frees wait for, and the frees (ChunkContext: shared by the stages).
    std::array<int32_t, 2>* m_host_deps = &m_own_pending_deps;
    std::vector<MemEvent>* m_host_events = nullptr;

    // Pipeline parallelism (lower_pp.cpp).
    std::shared_ptr<const Model> m_full_model;  // the whole model (FLOPs per token)
    // m_stage: the pipeline stage (0 to m_pp x m_virtual - 1), on rank m_stage mod m_pp.
    int m_pp = 1, m_virtual = 1, m_stage = 0, m_slots = 1, m_chunk = 0;
    int32_t m_unit_offset = 0;
    const std::vector<PipelineStep>* m_steps = nullptr;  // the rank's schedule (configure())
    bool m_first_stage = true, m_last_stage = true;
    bool m_final_reduce = false;          // inside reduceGradients
    int32_t m_recv_dep = -1;              // the compute task that starts the pass waits for this receive
    // Per micro-batch slot: the received activations, the stage's output kept for the backward,
    // the received output gradient.
    std::vector<BufferRef> m_recv_act, m_stage_out, m_recv_grad;
};

}  // namespace detail
}  // namespace shardcast::core
