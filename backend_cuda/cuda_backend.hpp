#pragma once
// The CUDA + NCCL backend (DESIGN.md section 6; issue 8): one process per GPU under mpirun or
// srun, one thread per GPU of one process (`run --gpus N`, an exec::InProcessWorld as the
// Bootstrap), or one process emulating one rank of a larger world (--emulate-rank).
//
// Streams: one CUDA stream per Program stream, with FSDP2's priorities: the all-gather copy-in,
// all-gather and reduce-scatter streams are created with high priority and the all-reduce stream
// with the default one (FSDPCommContext.lazy_init in
// torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py: `high_priority = -1` for
// all_gather_copy_in_stream, all_gather_stream and reduce_scatter_stream; all_reduce_stream =
// Stream()); compute and the host-copy streams run at the default priority. The executor calls
// runTask from the stream's worker thread. runTask makes the task's cross-stream dependencies
// explicit on the device (cudaStreamWaitEvent on each dependency's end event), records a start
// event, enqueues the work, records the end event and synchronizes the stream before returning.
// The executor has already seen every dependency end, so the waits cost nothing; they keep the
// order correct on the device should the synchronization ever go. The event pair gives each
// task's GPU time (eventBusyNs: per stream and step); the executor's host-side clock stays the
// source of the recorded timeline.
//
// Memory: the counted buffers (the executor's CountingAllocator over allocate / release) come
// from a cudaMemPool_t of their own (cudaMemPoolCreate; release threshold UINT64_MAX, so memory
// freed to the pool stays reserved instead of going back to the driver at a synchronization),
// allocated with cudaMallocFromPoolAsync on a dedicated allocation stream, zeroed there and that
// stream synchronized before the pointer is returned. Backend::allocate has no stream argument:
// the executor allocates a task's buffers under its allocator lock, and counts them by buffer id
// whatever stream later uses them; a synchronous allocation on one stream hands out a buffer that
// every stream may use at once, without a stream in the interface and without cudaMalloc's and
// cudaFree's device-wide synchronization. release is cudaFreeAsync on the same stream, not
// synchronized: no kernel reads a counted buffer, and the executor frees one only after its last
// user ended. Kernel scratch is stream-ordered on the task's stream (cudaMallocAsync /
// cudaFreeAsync from the device's default pool, same threshold). An allocation the pool cannot
// satisfy throws std::bad_alloc whose message names the bytes asked for, the plan's predicted peak
// (options.predicted_peak_bytes), the pool's reserved bytes and cudaMemGetInfo's free / total;
// the executor turns it into the run's error. memoryCheck() reads the pool's high-water marks
// (cudaMemPoolAttrReservedMemHigh, UsedMemHigh) and cudaMemGetInfo's used bytes, for the record.
//
// Compute (core::OpShape): GEMMs with cuBLASLt in the op's dtype (bf16 by default, fp32
// accumulate); attention as its FLOP-equivalent GEMMs per sequence and head (scores s x s x d and
// values s x d x s; the backward twice), not a fused attention kernel; elementwise ops as a
// streaming kernel of their HBM bytes; the optimizer step as a fused AdamW kernel over the fp32
// shard its bytes stand for (28 bytes per element). Kernels work on per-stream scratch, not on the
// counted buffers (as the CPU backend does): the counting allocator holds the Program's memory.
// Host-stream work (the optimizer under CPU offload) runs on the CPU as memory traffic; host <->
// device copies are cudaMemcpyAsync of their bytes to / from pinned host memory.
//
// Collectives: ncclAllGather / ncclReduceScatter / ncclAllReduce of the task's bytes in its dtype
// (2-byte dtypes as ncclBfloat16 / ncclFloat16, fp32 as ncclFloat32, other dtypes as fp32 words
// of the same byte count), reductions with ncclAvg: the mean over the group, as FSDP's gradient
// divide factors give (see backend_cpu/cpu_backend.hpp). One communicator per (stream, process
// group), so streams never share one; its ncclUniqueId comes from the group's first rank through
// one Bootstrap::allGather over the world, then ncclCommInitRank. In a world of threads a failed
// rank's peers may be blocked in a collective: abortCommunicators() (ncclCommAbort) frees them.
//
// Pipeline P2P (pp > 1; each rank runs its stage's Program): one NCCL communicator of two ranks
// per link, a link being one direction between two neighbouring stages (stage g's activations to
// g + 1, or its input gradient to g - 1; Interleaved1F1B's stages wrap around the pipeline ranks).
// NCCL matches a pair's sends and receives in issue order and has no tags (NCCL docs,
// "Point-to-point communication"); on a link of its own each transfer is one micro-batch's, and a
// stage sends and receives its micro-batches in the same order, so the k-th send meets the k-th
// receive. A send is torch's isend: ncclSend on the link's own stream, after the task's start on
// its stream, from the link's buffer, and not waited for (the next step's barrier synchronizes the
// device); a receive is ncclRecv on the task's stream, which the task waits for as for a
// collective. Every rank creates the links in the same order (each id from the sending rank
// through one Bootstrap::allGather over the world), joining those it is at either end of. Verify
// mode sends core/base/verify_data.hpp's p2pByte pattern (written by a kernel on the link's stream)
// and checks every received byte.
//
// Emulation (emulate_rank set): the process runs rank R's Program alone: every allocation and
// every kernel for real, each collective's output (its receive buffer of the real size) filled
// locally by a fill kernel instead of communicated. Those tasks are reported by emulatedTasks().
//
// Verify mode (`verify`): every collective sends the deterministic data of core/base/verify_data.hpp
// (as the CPU backend does: parameters for all-gathers, per-rank gradients for reductions; 2-byte
// dtypes as bf16), and the received buffer is copied back and checked: the gathered parameters
// exactly, the averaged gradients within NCCL's bf16 / fp32 rounding (ncclAvg may scale each
// input before summing, so a group whose size is not a power of two does not average exactly).
// A mismatch is an error naming the unit, the rank and the first bad element.
#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include "executor/backend.hpp"
#include "executor/bootstrap.hpp"

namespace shardcast::cuda {

inline constexpr const char* kComputeNote =
    "cuBLASLt GEMMs in the op's dtype (bf16 by default) with fp32 accumulation; attention as FLOP-equivalent "
    "GEMMs per sequence and head (no fused attention kernel); elementwise ops as a streaming kernel of their "
    "bytes; the optimizer as a fused AdamW kernel over the fp32 shard; collectives with NCCL (ncclAvg reductions)";
inline constexpr const char* kEmulatedNote =
    "; collectives emulated: each collective's output filled locally by a kernel (no communication), those tasks "
    "listed as emulated";

// How the ranks meet (executor/bootstrap.hpp): MPI under mpirun / srun, the in-process world of
// `run --gpus N` (executor/in_process_world.hpp), or none for an emulated rank (nullptr).
using Bootstrap = exec::Bootstrap;

struct CudaBackendOptions {
    int device = 0;                        // CUDA device ordinal of this process
    std::optional<int32_t> emulate_rank;   // run this rank of the Program alone, collectives filled locally
    int32_t world_size = 1;                // the Program's world size (emulation) or the bootstrap's
    bool verify = false;                   // check every collective's data (not with emulate_rank)
    int64_t predicted_peak_bytes = 0;      // the plan's predicted peak per rank, for out-of-memory messages (0: unknown)
    // Other GPUs of this process (a world of threads): kernel scratch, which holds the collectives'
    // buffers, is made accessible to them (see createPools).
    std::vector<int> peer_devices;
};

// The device-side cross-check of the counted memory, read after a run.
struct DeviceMemoryCheck {
    int64_t pool_reserved_high_bytes = 0;  // cudaMemPoolAttrReservedMemHigh of the counted buffers' pool
    int64_t pool_used_high_bytes = 0;      // cudaMemPoolAttrUsedMemHigh of the same pool
    int64_t device_used_bytes = 0;         // cudaMemGetInfo: total - free, every process and library included
    int64_t device_total_bytes = 0;
};

class CudaBackend final : public exec::Backend {
public:
    // Errors: the device cannot be selected, a stream or the GEMM runner cannot be created.
    // bootstrap: required unless options.emulate_rank is set; it must outlive the backend.
    static core::Result<std::unique_ptr<CudaBackend>> create(const CudaBackendOptions& options, Bootstrap* bootstrap);
    ~CudaBackend() override;
    CudaBackend(const CudaBackend&) = delete;
    CudaBackend& operator=(const CudaBackend&) = delete;

    std::string_view name() const override { return "cuda"; }
    int32_t rank() const override;
    int32_t worldSize() const override;
    core::Status prepare(const core::Program& program) override;
    void* allocate(int64_t bytes) override;
    void release(void* ptr, int64_t bytes) noexcept override;
    core::Status runTask(const core::Program& program, int32_t id, int32_t step) override;
    core::Status barrier() override;
    void abortRun(const core::Error& error) noexcept override;

    bool emulating() const { return m_options.emulate_rank.has_value(); }
    // Task ids whose work was emulated (collectives filled locally), ascending; read after the run.
    std::vector<int32_t> emulatedTasks() const;
    // Verify mode: collectives checked on this rank and their elements; read after the run.
    int64_t collectivesVerified() const;
    int64_t elementsVerified() const;
    // Time each stream's tasks of step `step` (warmup steps counted from 0) spent between their
    // start and end events on the GPU (cudaEventElapsedTime), summed; zeros for a step not run.
    std::array<int64_t, core::kStreamCount> eventBusyNs(int32_t step) const;
    // The counted buffers' pool high-water marks and the device's used bytes now.
    core::Result<DeviceMemoryCheck> memoryCheck() const;
    // From any thread, for a world of threads in one process: aborts this rank's NCCL
    // communicators (ncclCommAbort), so that a stream blocked in a collective whose peer failed
    // returns. The backend runs no collective afterwards.
    void abortCommunicators() noexcept;

private:
    explicit CudaBackend(const CudaBackendOptions& options, Bootstrap* bootstrap);
    struct StreamState;
    core::Status compute(const core::Program& program, int32_t id, int32_t step, StreamState& s);
    core::Status collective(const core::Program& program, int32_t id, StreamState& s);
    // A collective `t` (task `id` itself, or a tensor-parallel one inside compute task `id`); FSDP's
    // reductions average (`mean`), tensor-parallel ones sum partial results.
    core::Status runCollective(const core::Program& program, int32_t id, const core::Task& t, StreamState& s, bool mean);
    core::Status copy(const core::Task& task, StreamState& s);
    // Pipeline P2P (see the header comment): the links this rank is at either end of.
    core::Status prepareLinks(const core::Program& program);
    core::Status p2p(const core::Program& program, int32_t id, StreamState& s);
    core::Status createPools();
    void destroyEvents() noexcept;
    std::string outOfMemoryMessage(int64_t bytes, std::string_view call, int error) const;

    CudaBackendOptions m_options;
    Bootstrap* m_bootstrap = nullptr;
    std::array<std::unique_ptr<StreamState>, core::kStreamCount> m_streams;  // by core::Stream
    struct Comm;
    std::map<std::pair<int, int32_t>, std::unique_ptr<Comm>> m_comms;  // by (stream, group)
    struct Link;
    std::map<int32_t, std::unique_ptr<Link>> m_links;  // by linkKey(sending stage, direction)
    std::array<int64_t, core::kStreamCount> m_verified_per_stream{};  // each written by its stream's worker
    std::array<int64_t, core::kStreamCount> m_elements_per_stream{};
    mutable std::mutex m_emulated_mutex;
    std::vector<int32_t> m_emulated;

    // Counted buffers: m_pool, allocated on m_alloc_stream and synchronized (see the header comment).
    mutable std::mutex m_pool_mutex;
    cudaMemPool_t m_pool = nullptr;
    cudaStream_t m_alloc_stream = nullptr;
    // Per task: events recorded on its stream before and after its work.
    std::vector<cudaEvent_t> m_task_start, m_task_end;
    mutable std::mutex m_event_mutex;
    std::map<int32_t, std::array<int64_t, core::kStreamCount>> m_event_busy;  // by step
    std::mutex m_comms_mutex;  // m_comms while prepare() adds to it, against abortCommunicators()
    std::atomic<bool> m_comms_aborted{false};
};

}  // namespace shardcast::cuda
