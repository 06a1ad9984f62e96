#include "backend_cuda/cuda_backend.hpp"

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <new>
#include <numeric>

#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <nccl.h>

#include "backend_cuda/cuda_check.hpp"
#include "backend_cuda/gemm.hpp"
#include "backend_cuda/kernels.hpp"
#include "core/base/units.hpp"
#include "core/base/verify_data.hpp"
#include "core/results/compare.hpp"

namespace shardcast::cuda {
namespace {

// Scratch values: every 16-bit half is bf16 0x3C00 (2^-7) and every 32-bit word reads as an fp32
// near 0.0078, so GEMMs and reductions never meet NaNs or denormals whatever dtype reads them.
constexpr uint32_t kScratchPattern = 0x3C003C00u;
// What an emulated collective writes into its output: a different value, so that a dump shows
// which buffers were filled locally.
constexpr uint32_t kEmulatedPattern = 0x3F803F80u;

// An allocation the device could not satisfy: what() names the bytes asked for and the device's
// free bytes, so the executor's out-of-memory report is complete.
class DeviceOutOfMemory : public std::bad_alloc {
public:
    explicit DeviceOutOfMemory(std::string message) : m_message(std::move(message)) {}
    const char* what() const noexcept override { return m_message.c_str(); }

private:
    std::string m_message;
};

struct DeviceBuffer {
    void* ptr = nullptr;
    int64_t bytes = 0;
};

// Grows `b` to at least `bytes` (contents filled with kScratchPattern on `stream`). Stream-ordered
// (cudaFreeAsync / cudaMallocAsync from the device's default pool, whose release threshold is
// raised in create()): unlike cudaFree, neither synchronizes the device ("CUDA Runtime API, Stream
// Ordered Memory Allocator").
core::Status grow(DeviceBuffer& b, int64_t bytes, cudaStream_t stream) {
    if (b.bytes >= bytes) return core::Ok{};
    if (b.ptr != nullptr) {
        SHARDCAST_CUDA_TRY(cudaCheck, cudaFreeAsync(b.ptr, stream));
        b = {};
    }
    const int64_t rounded = (bytes + 255) / 256 * 256;
    SHARDCAST_CUDA_TRY(cudaCheck, cudaMallocAsync(&b.ptr, static_cast<size_t>(rounded), stream));
    b.bytes = rounded;
    return cudaCheck(launchFill(b.ptr, rounded, kScratchPattern, stream), "launchFill (scratch)");
}

// A pool that keeps what it reserved: a release threshold of UINT64_MAX means memory freed to the
// pool is never returned to the OS at a synchronization (cudaMemPoolAttrReleaseThreshold).
core::Status keepReserved(cudaMemPool_t pool) {
    uint64_t threshold = UINT64_MAX;
    return cudaCheck(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold),
                     "cudaMemPoolSetAttribute(cudaMemPoolAttrReleaseThreshold)");
}

ncclRedOp_t avg() { return ncclAvg; }

// Verify data in the collective's element type (core/base/verify_data.hpp).
using F32Codec = core::verify::F32Values;
using Bf16Codec = core::verify::Bf16Values;

struct VerifyCall {
    const core::Program& program;
    int32_t id;
    const core::Task& task;               // the collective (a TP one: as a task of its own, inside task `id`)
    bool mean;                            // FSDP's reductions average; tensor-parallel ones sum
    const std::vector<int32_t>& members;  // world ranks in communicator order
    int32_t rank;
    int64_t count;                        // elements per rank (the whole buffer for all-reduce)
    void* send;
    void* recv;
    ncclComm_t comm;
    ncclDataType_t type;
    cudaStream_t stream;
};

// One collective on verify data: fills the send buffer, runs it, copies the result back and checks
// it. Sets `checked` to the elements verified.
template <class Codec>
core::Status verifyCollective(const VerifyCall& c, int64_t& checked) {
    using T = typename Codec::T;
    checked = 0;
    const core::Task& task = c.task;
    const core::TaskKind kind = task.kind;
    const auto members = static_cast<int64_t>(c.members.size());
    const int64_t send_elems = kind == core::TaskKind::ReduceScatter ? c.count * members : c.count;
    const int64_t recv_elems = kind == core::TaskKind::AllGather ? c.count * members : c.count;
    const int32_t unit = std::max(task.unit, 0);
    const auto position = static_cast<int64_t>(std::find(c.members.begin(), c.members.end(), c.rank) - c.members.begin());
    std::vector<T> send(static_cast<size_t>(send_elems)), recv(static_cast<size_t>(recv_elems), Codec::enc(-1.0f));
    for (int64_t i = 0; i < send_elems; ++i) {
        send[static_cast<size_t>(i)] = kind == core::TaskKind::AllGather
                                           ? Codec::enc(core::verify::paramValue(unit, position * c.count + i))
                                           : Codec::enc(core::verify::gradValue(unit, c.rank, i, members));
    }
    const auto send_bytes = static_cast<size_t>(send_elems) * sizeof(T);
    const auto recv_bytes = static_cast<size_t>(recv_elems) * sizeof(T);
    SHARDCAST_CUDA_TRY(cudaCheck, cudaMemcpyAsync(c.send, send.data(), send_bytes, cudaMemcpyHostToDevice, c.stream));
    SHARDCAST_CUDA_TRY(cudaCheck, cudaMemcpyAsync(c.recv, recv.data(), recv_bytes, cudaMemcpyHostToDevice, c.stream));
    const auto n = static_cast<size_t>(c.count);
    switch (kind) {
        case core::TaskKind::AllGather:
            SHARDCAST_CUDA_TRY(ncclCheck, ncclAllGather(c.send, c.recv, n, c.type, c.comm, c.stream));
            break;
        case core::TaskKind::ReduceScatter:
            SHARDCAST_CUDA_TRY(ncclCheck, ncclReduceScatter(c.send, c.recv, n, c.type, c.mean ? avg() : ncclSum, c.comm, c.stream));
            break;
        default:
            SHARDCAST_CUDA_TRY(ncclCheck, ncclAllReduce(c.send, c.recv, n, c.type, c.mean ? avg() : ncclSum, c.comm, c.stream));
            break;
    }
    SHARDCAST_CUDA_TRY(cudaCheck, cudaMemcpyAsync(recv.data(), c.recv, recv_bytes, cudaMemcpyDeviceToHost, c.stream));
    SHARDCAST_CUDA_TRY(cudaCheck, cudaStreamSynchronize(c.stream));

    const int64_t offset = kind == core::TaskKind::ReduceScatter ? position * c.count : 0;
    for (int64_t i = 0; i < recv_elems; ++i) {
        const T got = recv[static_cast<size_t>(i)];
        bool ok = false;
        T want{};
        if (kind == core::TaskKind::AllGather) {
            want = Codec::enc(core::verify::paramValue(unit, i));
            ok = got == want;
        } else {
            float sum = 0;
            for (int32_t member : c.members) sum += core::verify::gradValue(unit, member, offset + i, members);
            const float mean = c.mean ? sum / static_cast<float>(members) : sum;  // a TP reduction: the sum
            want = Codec::enc(mean);
            // ncclAvg may scale each input by 1/members before summing: within members x bf16's
            // half-ulp of the mean (exact for the power-of-two groups FSDP uses).
            ok = std::fabs(Codec::dec(got) - mean) <= std::fabs(mean) * static_cast<float>(members) / 256.0f;
        }
        if (ok) continue;
        const std::string what =
            kind == core::TaskKind::AllGather
                ? fmt::format("element {} of the all-gathered parameters", i)
                : fmt::format("element {} of the {} gradient (element {} of the unit's gradient buffer)", i,
                              kind == core::TaskKind::ReduceScatter ? "reduce-scattered shard of the" : "all-reduced",
                              offset + i);
        return core::makeError(fmt::format("verify failed for unit {} on rank {} ({}, task {}): {} is {}, expected {}",
                                           core::taskUnitName(c.program, c.id), c.rank, c.program.taskLabel(c.id), c.id, what,
                                           Codec::show(got), Codec::show(want)));
    }
    checked = recv_elems;
    return core::Ok{};
}

}  // namespace

struct CudaBackend::StreamState {
    cudaStream_t stream = nullptr;
    GemmRunner gemm;
    bool gemm_ready = false;
    std::array<DeviceBuffer, 4> buf{};  // GEMM / attention operands, Adam's p, g, m, v
    DeviceBuffer send, recv;
    void* pinned = nullptr;             // host side of host <-> device copies
    int64_t pinned_bytes = 0;
    std::vector<char> host_src, host_dst;  // Host-stream work
};

struct CudaBackend::Comm {
    ncclComm_t comm = nullptr;
    int32_t members = 0;
    std::vector<int32_t> ranks;  // world ranks in communicator order
};

// One pipeline P2P link: the sender is the communicator's rank 0, the receiver its rank 1.
struct CudaBackend::Link {
    ncclComm_t comm = nullptr;
    bool sender = false;
    int32_t peer_rank = -1;         // the world rank at the other end
    cudaStream_t stream = nullptr;  // the sender's: its sends, not waited for
    DeviceBuffer buf;               // the sender's send buffer, stream-ordered on `stream`
};

namespace {

// A link's key: the sending stage and the direction (activations forward, input gradients back).
int32_t linkKey(int32_t from_stage, bool activations) { return from_stage * 2 + (activations ? 0 : 1); }

}  // namespace

CudaBackend::CudaBackend(const CudaBackendOptions& options, Bootstrap* bootstrap)
    : m_options(options), m_bootstrap(bootstrap) {}

core::Status CudaBackend::createPools() {
    // The counted buffers' own pool (not the device's default one, which holds kernel scratch), so
    // its high-water mark is the counted allocations' (plus the counting allocator's cache).
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypeNone;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = m_options.device;
    SHARDCAST_CUDA_TRY(cudaCheck, cudaMemPoolCreate(&m_pool, &props));
    if (auto k = keepReserved(m_pool); !k) return k;
    cudaMemPool_t scratch = nullptr;
    SHARDCAST_CUDA_TRY(cudaCheck, cudaDeviceGetDefaultMemPool(&scratch, m_options.device));
    if (auto k = keepReserved(scratch); !k) return k;
    // Ranks that are threads of one process: NCCL's P2P transport between them may read and write
    // a peer's buffers directly, and pool memory is accessible only from its own device until
    // cudaMemPoolSetAccess grants more (CUDA Runtime API, Memory Pools; the same fix as XLA's
    // cudaMallocAsync allocator for intra-node NCCL, openxla/xla#14891). A peer without P2P access
    // gets none: NCCL then goes through host memory.
    for (int peer : m_options.peer_devices) {
        if (peer == m_options.device) continue;
        int can = 0;
        SHARDCAST_CUDA_TRY(cudaCheck, cudaDeviceCanAccessPeer(&can, peer, m_options.device));
        if (can == 0) continue;
        cudaMemAccessDesc access{};
        access.location.type = cudaMemLocationTypeDevice;
        access.location.id = peer;
        access.flags = cudaMemAccessFlagsProtReadWrite;
        SHARDCAST_CUDA_TRY(cudaCheck, cudaMemPoolSetAccess(scratch, &access, 1));
    }
    return cudaCheck(cudaStreamCreateWithFlags(&m_alloc_stream, cudaStreamNonBlocking),
                     "cudaStreamCreateWithFlags (allocation stream)");
}

core::Result<std::unique_ptr<CudaBackend>> CudaBackend::create(const CudaBackendOptions& options, Bootstrap* bootstrap) {
    if (!options.emulate_rank && bootstrap == nullptr) {
        return core::makeError("the CUDA backend needs a bootstrap (MPI) unless it emulates one rank");
    }
    if (options.emulate_rank && options.verify) {
        return core::makeError("verify mode checks communicated data; an emulated rank communicates nothing");
    }
    std::unique_ptr<CudaBackend> b(new CudaBackend(options, bootstrap));
    SHARDCAST_CUDA_TRY(cudaCheck, cudaSetDevice(options.device));
    if (auto pools = b->createPools(); !pools) return pools.error();
    int least = 0, greatest = 0;
    SHARDCAST_CUDA_TRY(cudaCheck, cudaDeviceGetStreamPriorityRange(&least, &greatest));
    for (int st = 0; st < core::kStreamCount; ++st) {
        const auto stream = static_cast<core::Stream>(st);
        // FSDP2's high-priority streams (see the header); CUDA: lower numbers are higher priority.
        const bool high = stream == core::Stream::AllGatherCopyIn || stream == core::Stream::AllGather ||
                          stream == core::Stream::ReduceScatter;
        auto state = std::make_unique<StreamState>();
        SHARDCAST_CUDA_TRY(cudaCheck,
                           cudaStreamCreateWithPriority(&state->stream, cudaStreamNonBlocking, high ? greatest : least));
        b->m_streams[static_cast<size_t>(st)] = std::move(state);
    }
    return b;
}

CudaBackend::~CudaBackend() {
    // Teardown: errors have nowhere to go, and every call below is safe on a failed device.
    cudaSetDevice(m_options.device);
    cudaDeviceSynchronize();
    if (!m_comms_aborted) {
        for (auto& [key, c] : m_comms) {
            if (c->comm != nullptr) ncclCommDestroy(c->comm);
        }
        for (auto& [key, l] : m_links) {
            if (l->comm != nullptr) ncclCommDestroy(l->comm);
        }
    }
    for (auto& [key, l] : m_links) {
        if (l->stream == nullptr) continue;
        if (l->buf.ptr != nullptr) cudaFreeAsync(l->buf.ptr, l->stream);
        cudaStreamSynchronize(l->stream);
        cudaStreamDestroy(l->stream);
    }
    destroyEvents();
    for (auto& s : m_streams) {
        if (!s) continue;
        for (DeviceBuffer* b : {&s->buf[0], &s->buf[1], &s->buf[2], &s->buf[3], &s->send, &s->recv}) {
            if (b->ptr != nullptr) cudaFreeAsync(b->ptr, s->stream);
        }
        if (s->pinned != nullptr) cudaFreeHost(s->pinned);
        if (s->stream != nullptr) {
            cudaStreamSynchronize(s->stream);
            cudaStreamDestroy(s->stream);
        }
    }
    if (m_alloc_stream != nullptr) {
        cudaStreamSynchronize(m_alloc_stream);
        cudaStreamDestroy(m_alloc_stream);
    }
    // Blocks the counting allocator still holds are freed by it before the backend goes (the
    // executor's Run owns it); whatever is left goes with the pool.
    if (m_pool != nullptr) cudaMemPoolDestroy(m_pool);
}

void CudaBackend::destroyEvents() noexcept {
    for (std::vector<cudaEvent_t>* events : {&m_task_start, &m_task_end}) {
        for (cudaEvent_t e : *events) {
            if (e != nullptr) cudaEventDestroy(e);
        }
        events->clear();
    }
}

int32_t CudaBackend::rank() const {
    if (m_options.emulate_rank) return *m_options.emulate_rank;
    return m_bootstrap->rank();
}

int32_t CudaBackend::worldSize() const { return m_options.world_size; }

core::Status CudaBackend::prepare(const core::Program& program) {
    if (program.world_size != worldSize()) {
        return core::makeError(fmt::format("the Program is for {} ranks but the CUDA backend runs {}", program.world_size,
                                           worldSize()));
    }
    SHARDCAST_CUDA_TRY(cudaCheck, cudaSetDevice(m_options.device));
    // Two events per task, both recorded on the task's stream: its start and its end. The end one
    // is also what tasks of other streams that depend on it wait for (cudaStreamWaitEvent).
    destroyEvents();
    m_task_start.assign(static_cast<size_t>(program.size()), nullptr);
    m_task_end.assign(static_cast<size_t>(program.size()), nullptr);
    for (std::vector<cudaEvent_t>* events : {&m_task_start, &m_task_end}) {
        for (cudaEvent_t& e : *events) SHARDCAST_CUDA_TRY(cudaCheck, cudaEventCreate(&e));
    }
    {
        std::lock_guard lock(m_event_mutex);
        m_event_busy.clear();
    }
    if (emulating()) return core::Ok{};  // no communicators: collectives are filled locally
    // Every rank creates the same (stream, group) communicators in the same order; each
    // communicator's id comes from the group's first rank, through one all-gather over the world.
    std::vector<std::pair<int, int32_t>> needed;
    for (const core::Task& t : program.tasks) {
        if (core::isCollective(t.kind)) needed.emplace_back(static_cast<int>(t.stream), t.group);
        // Tensor-parallel collectives inside compute tasks: on the task's stream, their own group.
        const core::OpShape* ops = program.opsBegin(t);
        for (uint32_t i = 0; i < t.ops.count; ++i)
            if (core::isTpCollective(ops[i].kind)) needed.emplace_back(static_cast<int>(t.stream), ops[i].group);
    }
    std::sort(needed.begin(), needed.end());
    needed.erase(std::unique(needed.begin(), needed.end()), needed.end());
    for (const auto& key : needed) {
        if (m_comms.count(key) != 0) continue;
        const std::vector<int32_t> members = core::groupRanks(program, key.second, rank());
        if (members.empty()) {
            return core::makeError(fmt::format("process group {} of the Program has no instance holding rank {} (world size {})",
                                               key.second, rank(), worldSize()));
        }
        const auto position = static_cast<int>(std::find(members.begin(), members.end(), rank()) - members.begin());
        ncclUniqueId mine{};
        if (position == 0) SHARDCAST_CUDA_TRY(ncclCheck, ncclGetUniqueId(&mine));
        std::vector<ncclUniqueId> all(static_cast<size_t>(m_bootstrap->worldSize()));
        if (auto s = m_bootstrap->allGather(&mine, sizeof(mine), all.data()); !s) return s;
        auto comm = std::make_unique<Comm>();
        comm->members = static_cast<int32_t>(members.size());
        comm->ranks = members;
        SHARDCAST_CUDA_TRY(ncclCheck, ncclCommInitRank(&comm->comm, comm->members,
                                                       all[static_cast<size_t>(members.front())], position));
        std::lock_guard lock(m_comms_mutex);
        if (m_comms_aborted) {
            ncclCommAbort(comm->comm);
            return core::makeError("the run was aborted while its NCCL communicators were being created");
        }
        m_comms.emplace(key, std::move(comm));
    }
    return prepareLinks(program);
}

core::Status CudaBackend::prepareLinks(const core::Program& program) {
    if (program.pp_size < 2 || !m_links.empty()) return core::Ok{};
    int32_t group = -1;
    for (const core::Task& t : program.tasks) {
        if (core::isP2P(t.kind)) {
            group = t.group;
            break;
        }
    }
    if (group < 0) return core::Ok{};
    // The pipeline ranks of this rank's pipeline, in order.
    const std::vector<int32_t> members = core::groupRanks(program, group, rank());
    if (static_cast<int>(members.size()) != program.pp_size) {
        return core::makeError(fmt::format("the pipeline group of rank {} has {} ranks, the Program's pipeline {}", rank(),
                                           members.size(), program.pp_size));
    }
    const int32_t stages = program.pp_size * std::max(1, program.pp_virtual);
    std::vector<ncclUniqueId> all(static_cast<size_t>(m_bootstrap->worldSize()));
    for (int32_t from = 0; from < stages; ++from) {
        for (const bool activations : {true, false}) {
            const int32_t to = from + (activations ? 1 : -1);
            if (to < 0 || to >= stages) continue;
            const int32_t sender = members[static_cast<size_t>(from % program.pp_size)];
            const int32_t receiver = members[static_cast<size_t>(to % program.pp_size)];
            ncclUniqueId mine{};
            if (sender == rank()) SHARDCAST_CUDA_TRY(ncclCheck, ncclGetUniqueId(&mine));
            if (auto s = m_bootstrap->allGather(&mine, sizeof(mine), all.data()); !s) return s;
            if (rank() != sender && rank() != receiver) continue;
            auto link = std::make_unique<Link>();
            link->sender = rank() == sender;
            link->peer_rank = link->sender ? receiver : sender;
            SHARDCAST_CUDA_TRY(ncclCheck, ncclCommInitRank(&link->comm, 2, all[static_cast<size_t>(sender)], link->sender ? 0 : 1));
            if (link->sender) {
                SHARDCAST_CUDA_TRY(cudaCheck, cudaStreamCreateWithFlags(&link->stream, cudaStreamNonBlocking));
            }
            std::lock_guard lock(m_comms_mutex);
            if (m_comms_aborted) {
                ncclCommAbort(link->comm);
                link->comm = nullptr;
                return core::makeError("the run was aborted while its NCCL communicators were being created");
            }
            m_links.emplace(linkKey(from, activations), std::move(link));
        }
    }
    return core::Ok{};
}

core::Status CudaBackend::p2p(const core::Program& program, int32_t id, StreamState& s) {
    const core::Task& t = program.tasks[static_cast<size_t>(id)];
    const bool send = t.kind == core::TaskKind::Send;
    const int32_t own = program.stageOf(t), peer_stage = own + t.peer;
    const int32_t from = send ? own : peer_stage;
    const bool activations = send == (t.peer > 0);
    const int64_t bytes = t.comm_bytes;
    if (emulating()) {
        {
            std::lock_guard lock(m_emulated_mutex);
            m_emulated.push_back(id);
        }
        if (send || bytes <= 0) return core::Ok{};
        if (auto g = grow(s.recv, bytes, s.stream); !g) return g;
        return cudaCheck(launchFill(s.recv.ptr, bytes, kEmulatedPattern, s.stream), "launchFill (emulated receive)");
    }
    if (bytes <= 0) return core::Ok{};
    if (m_comms_aborted) return core::makeError("the run was aborted: this rank's NCCL communicators are gone");
    const auto found = m_links.find(linkKey(from, activations));
    if (found == m_links.end()) {
        return core::makeError(fmt::format("no NCCL communicator was prepared for the P2P from stage {} to stage {}", from,
                                           from + (activations ? 1 : -1)));
    }
    Link& link = *found->second;
    const uint32_t seed = core::verify::p2pSeed(from, t.micro_batch, activations);
    const auto n = static_cast<size_t>(bytes);
    if (send) {
        // After the task's start on its stream: what it sends has been computed there.
        SHARDCAST_CUDA_TRY(cudaCheck, cudaStreamWaitEvent(link.stream, m_task_start[static_cast<size_t>(id)], 0));
        if (auto g = grow(link.buf, bytes, link.stream); !g) return g;
        if (m_options.verify) {
            SHARDCAST_CUDA_TRY(cudaCheck, launchP2PBytes(link.buf.ptr, bytes, seed, core::verify::kP2PByteStride, link.stream));
        }
        return ncclCheck(ncclSend(link.buf.ptr, n, ncclUint8, 1, link.comm, link.stream), "ncclSend");
    }
    if (auto g = grow(s.recv, bytes, s.stream); !g) return g;
    SHARDCAST_CUDA_TRY(ncclCheck, ncclRecv(s.recv.ptr, n, ncclUint8, 0, link.comm, s.stream));
    if (!m_options.verify) return core::Ok{};
    std::vector<unsigned char> got(n);
    SHARDCAST_CUDA_TRY(cudaCheck, cudaMemcpyAsync(got.data(), s.recv.ptr, n, cudaMemcpyDeviceToHost, s.stream));
    SHARDCAST_CUDA_TRY(cudaCheck, cudaStreamSynchronize(s.stream));
    for (int64_t i = 0; i < bytes; ++i) {
        const unsigned char want = core::verify::p2pByte(seed, i);
        if (got[static_cast<size_t>(i)] == want) continue;
        return core::makeError(fmt::format("verify failed: byte {} of the {} received from stage {} (rank {}) is {}, "
                                           "expected {} (what stage {} sends for micro-batch {})",
                                           i, activations ? "activations" : "input gradients", from, link.peer_rank,
                                           int{got[static_cast<size_t>(i)]}, int{want}, from, t.micro_batch));
    }
    ++m_verified_per_stream[static_cast<size_t>(t.stream)];
    m_elements_per_stream[static_cast<size_t>(t.stream)] += bytes;
    return core::Ok{};
}

void* CudaBackend::allocate(int64_t bytes) {
    if (bytes <= 0) return nullptr;
    std::lock_guard lock(m_pool_mutex);
    cudaSetDevice(m_options.device);
    void* p = nullptr;
    const cudaError_t e = cudaMallocFromPoolAsync(&p, static_cast<size_t>(bytes), m_pool, m_alloc_stream);
    if (e != cudaSuccess) {
        cudaGetLastError();  // cudaErrorMemoryAllocation is not sticky: clear it for the calls that follow
        throw DeviceOutOfMemory(outOfMemoryMessage(bytes, "cudaMallocFromPoolAsync", e));
    }
    // Resident and written once, as the CPU backend touches its pages; synchronized, so the block
    // is ready for every stream when the executor gets it.
    cudaError_t m = cudaMemsetAsync(p, 0, static_cast<size_t>(bytes), m_alloc_stream);
    if (m == cudaSuccess) m = cudaStreamSynchronize(m_alloc_stream);
    if (m != cudaSuccess) {
        cudaFreeAsync(p, m_alloc_stream);
        throw DeviceOutOfMemory(fmt::format("preparing a new {}-byte buffer on GPU {} failed: {} ({})", bytes,
                                            m_options.device, cudaGetErrorName(m), cudaGetErrorString(m)));
    }
    return p;
}

std::string CudaBackend::outOfMemoryMessage(int64_t bytes, std::string_view call, int error) const {
    size_t free_bytes = 0, total_bytes = 0;
    const cudaError_t info = cudaMemGetInfo(&free_bytes, &total_bytes);
    uint64_t reserved = 0;
    cudaMemPoolGetAttribute(m_pool, cudaMemPoolAttrReservedMemCurrent, &reserved);
    const auto e = static_cast<cudaError_t>(error);
    const std::string predicted =
        m_options.predicted_peak_bytes > 0
            ? fmt::format("{} bytes ({})", m_options.predicted_peak_bytes, core::formatBytes(m_options.predicted_peak_bytes))
            : std::string("not given");
    const std::string device =
        info == cudaSuccess ? fmt::format("{} bytes ({}) free of {} bytes ({})", free_bytes,
                                          core::formatBytes(static_cast<int64_t>(free_bytes)), total_bytes,
                                          core::formatBytes(static_cast<int64_t>(total_bytes)))
                            : fmt::format("unknown ({})", cudaGetErrorString(info));
    return fmt::format("out of device memory on GPU {}: {} of {} bytes ({}) failed with {}; the plan's predicted peak of "
                       "counted allocations is {} per rank; the pool of counted buffers holds {} bytes ({}); "
                       "cudaMemGetInfo: {}",
                       m_options.device, call, bytes, core::formatBytes(bytes), cudaGetErrorName(e), predicted, reserved,
                       core::formatBytes(static_cast<int64_t>(reserved)), device);
}

void CudaBackend::release(void* ptr, int64_t) noexcept {
    if (ptr == nullptr) return;
    std::lock_guard lock(m_pool_mutex);
    cudaSetDevice(m_options.device);
    // Stream-ordered: reusable by the next allocation on the allocation stream at once. No kernel
    // reads a counted buffer (kernels work on scratch), and the executor releases a buffer only
    // after its last task ended, so nothing on another stream can still use it.
    cudaFreeAsync(ptr, m_alloc_stream);
}

core::Result<DeviceMemoryCheck> CudaBackend::memoryCheck() const {
    std::lock_guard lock(m_pool_mutex);
    SHARDCAST_CUDA_TRY(cudaCheck, cudaSetDevice(m_options.device));
    DeviceMemoryCheck c;
    uint64_t value = 0;
    SHARDCAST_CUDA_TRY(cudaCheck, cudaMemPoolGetAttribute(m_pool, cudaMemPoolAttrReservedMemHigh, &value));
    c.pool_reserved_high_bytes = static_cast<int64_t>(value);
    SHARDCAST_CUDA_TRY(cudaCheck, cudaMemPoolGetAttribute(m_pool, cudaMemPoolAttrUsedMemHigh, &value));
    c.pool_used_high_bytes = static_cast<int64_t>(value);
    size_t free_bytes = 0, total_bytes = 0;
    SHARDCAST_CUDA_TRY(cudaCheck, cudaMemGetInfo(&free_bytes, &total_bytes));
    c.device_total_bytes = static_cast<int64_t>(total_bytes);
    c.device_used_bytes = static_cast<int64_t>(total_bytes - free_bytes);
    return c;
}

std::array<int64_t, core::kStreamCount> CudaBackend::eventBusyNs(int32_t step) const {
    std::lock_guard lock(m_event_mutex);
    const auto found = m_event_busy.find(step);
    return found == m_event_busy.end() ? std::array<int64_t, core::kStreamCount>{} : found->second;
}

int64_t CudaBackend::collectivesVerified() const {
    return std::accumulate(m_verified_per_stream.begin(), m_verified_per_stream.end(), int64_t{0});
}

int64_t CudaBackend::elementsVerified() const {
    return std::accumulate(m_elements_per_stream.begin(), m_elements_per_stream.end(), int64_t{0});
}

std::vector<int32_t> CudaBackend::emulatedTasks() const {
    std::lock_guard lock(m_emulated_mutex);
    std::vector<int32_t> ids = m_emulated;
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    return ids;
}

core::Status CudaBackend::barrier() {
    SHARDCAST_CUDA_TRY(cudaCheck, cudaSetDevice(m_options.device));
    SHARDCAST_CUDA_TRY(cudaCheck, cudaDeviceSynchronize());
    if (m_bootstrap != nullptr && !emulating()) return m_bootstrap->barrier();
    return core::Ok{};
}

void CudaBackend::abortCommunicators() noexcept {
    std::lock_guard lock(m_comms_mutex);
    if (m_comms_aborted.exchange(true)) return;
    cudaSetDevice(m_options.device);
    // ncclCommAbort is NCCL's way out of a collective that cannot complete: it stops the
    // communicator's pending operations and frees it (NCCL docs, "Fault Tolerance"). The pointer
    // stays in m_comms so the destructor knows not to destroy it again.
    for (auto& [key, c] : m_comms) {
        if (c->comm != nullptr) ncclCommAbort(c->comm);
    }
    for (auto& [key, l] : m_links) {
        if (l->comm != nullptr) ncclCommAbort(l->comm);
    }
}

void CudaBackend::abortRun(const core::Error& error) noexcept {
    if (m_bootstrap != nullptr && !emulating() && worldSize() > 1) m_bootstrap->abort(error.message);
}

core::Status CudaBackend::runTask(const core::Program& program, int32_t id, int32_t step) {
    const core::Task& t = program.tasks[static_cast<size_t>(id)];
    StreamState& s = *m_streams[static_cast<size_t>(t.stream)];
    SHARDCAST_CUDA_TRY(cudaCheck, cudaSetDevice(m_options.device));  // per thread in CUDA
    // Dependencies on other streams, made explicit on the device: the executor has already seen
    // them end, so these waits cost nothing, but the order no longer rests on the host alone.
    const int32_t* deps = program.depsBegin(t);
    for (uint32_t k = 0; k < t.deps.count; ++k) {
        const auto dep = static_cast<size_t>(deps[k]);
        if (program.tasks[dep].stream == t.stream) continue;  // one stream runs in order
        SHARDCAST_CUDA_TRY(cudaCheck, cudaStreamWaitEvent(s.stream, m_task_end[dep], 0));
    }
    const auto slot = static_cast<size_t>(id);
    SHARDCAST_CUDA_TRY(cudaCheck, cudaEventRecord(m_task_start[slot], s.stream));
    core::Status done = core::Ok{};
    if (core::isCollective(t.kind)) {
        done = collective(program, id, s);
    } else if (core::isP2P(t.kind)) {
        done = p2p(program, id, s);
    } else if (t.ops.count > 0) {
        done = compute(program, id, step, s);
    } else if (t.comm_bytes > 0) {
        done = copy(t, s);
    }
    if (!done) return done;
    SHARDCAST_CUDA_TRY(cudaCheck, cudaEventRecord(m_task_end[slot], s.stream));
    SHARDCAST_CUDA_TRY(cudaCheck, cudaStreamSynchronize(s.stream));
    float ms = 0;
    SHARDCAST_CUDA_TRY(cudaCheck, cudaEventElapsedTime(&ms, m_task_start[slot], m_task_end[slot]));
    std::lock_guard lock(m_event_mutex);
    m_event_busy[step][static_cast<size_t>(t.stream)] += std::llround(static_cast<double>(ms) * 1e6);
    return core::Ok{};
}

core::Status CudaBackend::compute(const core::Program& program, int32_t id, int32_t step, StreamState& s) {
    const core::Task& task = program.tasks[static_cast<size_t>(id)];
    const core::OpShape* ops = program.opsBegin(task);
    if (task.stream == core::Stream::Host) {  // CPU work (the optimizer under offload): its bytes as memory traffic
        for (uint32_t i = 0; i < task.ops.count; ++i) {
            const auto half = static_cast<size_t>(std::max<int64_t>(ops[i].bytes / 2, 0));
            if (half == 0) continue;
            if (s.host_src.size() < half) s.host_src.resize(half, 1);
            if (s.host_dst.size() < half) s.host_dst.resize(half, 0);
            std::memcpy(s.host_dst.data(), s.host_src.data(), half);
        }
        return core::Ok{};
    }
    if (task.kind == core::TaskKind::OptimizerStep) {
        // AdamW in fp32 moves 28 bytes per element (kernels.hpp); the op's bytes give the shard.
        int64_t bytes = 0;
        for (uint32_t i = 0; i < task.ops.count; ++i) bytes += ops[i].bytes;
        const int64_t n = bytes / 28;
        for (DeviceBuffer& b : s.buf) {
            if (auto g = grow(b, n * 4, s.stream); !g) return g;
        }
        return cudaCheck(launchAdam(static_cast<float*>(s.buf[0].ptr), static_cast<const float*>(s.buf[1].ptr),
                                    static_cast<float*>(s.buf[2].ptr), static_cast<float*>(s.buf[3].ptr), n, step + 1,
                                    s.stream),
                         "launchAdam");
    }
    for (uint32_t i = 0; i < task.ops.count; ++i) {
        const core::OpShape& op = ops[i];
        switch (op.kind) {
            case core::OpShapeKind::Gemm: {
                if (!s.gemm_ready) {
                    if (auto r = s.gemm.init(); !r) return r;
                    s.gemm_ready = true;
                }
                const core::DType dt = gemmDType(op.dtype);
                const int64_t item = core::itemSize(dt);
                for (auto [b, bytes] : {std::pair{0, op.m * op.k}, std::pair{1, op.k * op.n}, std::pair{2, op.m * op.n}}) {
                    if (auto g = grow(s.buf[static_cast<size_t>(b)], bytes * item, s.stream); !g) return g;
                }
                for (int64_t r = 0; r < std::max<int64_t>(op.batch, 1); ++r) {
                    if (auto g = s.gemm.run(op.m, op.n, op.k, dt, s.buf[0].ptr, s.buf[1].ptr, s.buf[2].ptr, s.stream); !g) {
                        return g;
                    }
                }
                break;
            }
            case core::OpShapeKind::Attention:
            case core::OpShapeKind::AttentionBackward: {
                // Per sequence and head: scores [s, s] = Q [s, d] K^T [d, s], then out [s, d] =
                // P [s, s] V [s, d]: 4 s^2 d FLOPs as opFlops counts them; the backward twice that.
                if (!s.gemm_ready) {
                    if (auto r = s.gemm.init(); !r) return r;
                    s.gemm_ready = true;
                }
                const core::DType dt = gemmDType(op.dtype);
                const int64_t item = core::itemSize(dt);
                const int64_t seq = op.seq, d = op.head_dim;
                const int64_t products = std::max<int64_t>(op.batch, 1) * op.heads *
                                         (op.kind == core::OpShapeKind::AttentionBackward ? 2 : 1);
                if (auto g = grow(s.buf[0], seq * d * item, s.stream); !g) return g;  // Q, then V
                if (auto g = grow(s.buf[1], d * seq * item, s.stream); !g) return g;  // K^T
                if (auto g = grow(s.buf[2], seq * seq * item, s.stream); !g) return g;  // scores
                if (auto g = grow(s.buf[3], seq * d * item, s.stream); !g) return g;  // out
                for (int64_t p = 0; p < products; ++p) {
                    if (auto g = s.gemm.run(seq, seq, d, dt, s.buf[0].ptr, s.buf[1].ptr, s.buf[2].ptr, s.stream); !g) return g;
                    if (auto g = s.gemm.run(seq, d, seq, dt, s.buf[2].ptr, s.buf[0].ptr, s.buf[3].ptr, s.stream); !g) return g;
                }
                break;
            }
            case core::OpShapeKind::Elementwise: {
                const int64_t half = op.bytes / 2;
                if (half <= 0) break;
                if (auto g = grow(s.buf[0], half, s.stream); !g) return g;
                if (auto g = grow(s.buf[1], half, s.stream); !g) return g;
                if (auto g = cudaCheck(launchTraffic(s.buf[0].ptr, s.buf[1].ptr, op.bytes, s.stream), "launchTraffic"); !g) {
                    return g;
                }
                break;
            }
            case core::OpShapeKind::TpAllGather:
            case core::OpShapeKind::TpReduceScatter:
            case core::OpShapeKind::TpAllReduce: {
                // On the task's stream, between its kernels: the collective as a task of its own.
                if (auto done = runCollective(program, id, core::tpCollectiveTask(task, op), s, /*mean=*/false); !done) return done;
                break;
            }
        }
    }
    return core::Ok{};
}

core::Status CudaBackend::copy(const core::Task& task, StreamState& s) {
    if (s.pinned_bytes < task.comm_bytes) {
        if (s.pinned != nullptr) {
            SHARDCAST_CUDA_TRY(cudaCheck, cudaFreeHost(s.pinned));
            s.pinned = nullptr;
            s.pinned_bytes = 0;
        }
        SHARDCAST_CUDA_TRY(cudaCheck, cudaMallocHost(&s.pinned, static_cast<size_t>(task.comm_bytes)));
        s.pinned_bytes = task.comm_bytes;
    }
    if (auto g = grow(s.send, task.comm_bytes, s.stream); !g) return g;
    const bool to_device = task.stream != core::Stream::DeviceToHost;
    if (to_device) {
        return cudaCheck(cudaMemcpyAsync(s.send.ptr, s.pinned, static_cast<size_t>(task.comm_bytes), cudaMemcpyHostToDevice,
                                         s.stream),
                         "cudaMemcpyAsync (host to device)");
    }
    return cudaCheck(cudaMemcpyAsync(s.pinned, s.send.ptr, static_cast<size_t>(task.comm_bytes), cudaMemcpyDeviceToHost,
                                     s.stream),
                     "cudaMemcpyAsync (device to host)");
}

core::Status CudaBackend::collective(const core::Program& program, int32_t id, StreamState& s) {
    return runCollective(program, id, program.tasks[static_cast<size_t>(id)], s, /*mean=*/true);
}

core::Status CudaBackend::runCollective(const core::Program& program, int32_t id, const core::Task& t, StreamState& s,
                                        bool mean) {
    int32_t members = t.group_size;
    ncclComm_t comm = nullptr;
    const Comm* group = nullptr;
    if (!emulating()) {
        if (m_comms_aborted) return core::makeError("the run was aborted: this rank's NCCL communicators are gone");
        auto found = m_comms.find({static_cast<int>(t.stream), t.group});
        if (found == m_comms.end()) return core::makeError("no NCCL communicator was prepared for this collective's group");
        group = found->second.get();
        comm = group->comm;
        members = group->members;
    }
    members = std::max(members, 1);
    ncclDataType_t type = ncclFloat32;
    int64_t word = 4;
    if (core::itemSize(t.dtype) == 2) {
        // Verify data is bf16 for every 2-byte dtype, as in the CPU backend.
        type = t.dtype == core::DType::F16 && !m_options.verify ? ncclFloat16 : ncclBfloat16;
        word = 2;
    }
    const int64_t total = t.comm_bytes / word;
    const int64_t count = t.kind == core::TaskKind::AllReduce ? total : total / members;  // per rank
    if (emulating()) {
        std::lock_guard lock(m_emulated_mutex);
        m_emulated.push_back(id);
    }
    if (count <= 0) return core::Ok{};
    const int64_t send_bytes = (t.kind == core::TaskKind::ReduceScatter ? count * members : count) * word;
    const int64_t recv_bytes = (t.kind == core::TaskKind::AllGather ? count * members : count) * word;
    if (auto g = grow(s.send, send_bytes, s.stream); !g) return g;
    if (auto g = grow(s.recv, recv_bytes, s.stream); !g) return g;
    if (emulating()) {
        return cudaCheck(launchFill(s.recv.ptr, recv_bytes, kEmulatedPattern, s.stream), "launchFill (emulated collective)");
    }
    if (m_options.verify) {
        const VerifyCall call{program, id, t, mean, group->ranks, rank(), count, s.send.ptr, s.recv.ptr, comm, type, s.stream};
        int64_t checked = 0;
        core::Status done = word == 2 ? verifyCollective<Bf16Codec>(call, checked) : verifyCollective<F32Codec>(call, checked);
        if (done && checked > 0) {
            ++m_verified_per_stream[static_cast<size_t>(t.stream)];
            m_elements_per_stream[static_cast<size_t>(t.stream)] += checked;
        }
        return done;
    }
    const auto n = static_cast<size_t>(count);
    switch (t.kind) {
        case core::TaskKind::AllGather:
            return ncclCheck(ncclAllGather(s.send.ptr, s.recv.ptr, n, type, comm, s.stream), "ncclAllGather");
        case core::TaskKind::ReduceScatter:
            return ncclCheck(ncclReduceScatter(s.send.ptr, s.recv.ptr, n, type, mean ? avg() : ncclSum, comm, s.stream),
                             "ncclReduceScatter");
        default:
            return ncclCheck(ncclAllReduce(s.send.ptr, s.recv.ptr, n, type, mean ? avg() : ncclSum, comm, s.stream),
                             "ncclAllReduce");
    }
}

}  // namespace shardcast::cuda
