#pragma once
// The CPU backend (DESIGN.md section 6): one MPI rank per process. Compute tasks run their ops'
// real sizes in fp32 with Eigen (GEMMs; attention as the FLOP-equivalent batched GEMMs;
// elementwise ops as memory traffic of their byte counts). Collectives run MPI_Allgather,
// MPI_Reduce_scatter_block and MPI_Allreduce of the task's byte size on a communicator of the
// task's process group per stream, so that streams never share one (MPI_THREAD_MULTIPLE: each
// stream's worker thread calls MPI on its own communicators, so communication overlaps compute).
//
// Kernels and collectives work on per-stream scratch, not on the counted buffers: the counting
// allocator holds the Program's memory, the scratch is the backend's workspace.
//
// Element types: a collective moves comm_bytes / itemSize(dtype) elements of the task's dtype, so
// the bytes on the wire are the Program's. fp32 payloads are MPI_FLOAT; 2-byte payloads (bf16,
// fp16) are 16-bit words reduced with a bf16 sum (an MPI_Op of our own: MPI has no bf16); other
// dtypes move as fp32 words of the same byte count.
//
// Reductions average over the group (MPI sum, then divide by the group size), as FSDP does by
// default: FSDP1 divides by the world size around the reduce-scatter (gradient pre/post-divide
// factors), FSDP2 reduces with ReduceOp.AVG or the same divide factors, and HSDP's replicate
// all-reduce averages again, so a gradient is the mean over all data-parallel ranks
// (torch.distributed.fsdp docs; torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py).
//
// Verify mode (deterministic data, small integers so every sum is exact in bf16):
//   - a unit's parameter element i has the value param(unit, i) for every rank; an all-gather
//     sends the rank's shard (elements position*count ...) and the gathered buffer must equal
//     param(unit, 0 .. S) on every rank;
//   - gradient element i on rank r is grad(unit, r, i); after a reduce-scatter this rank's shard
//     must be the mean over the group's ranks of grad(unit, member, position*count + i), after an
//     all-reduce the whole buffer the mean of grad(unit, member, i).
// A mismatch is an error naming the unit, the rank and the first bad element, expected and actual.
//
// Test hooks (environment, for the fault tests): SHARDCAST_TEST_FAIL_RANK=R makes rank R fail its
// first compute task; SHARDCAST_TEST_KILL_RANK=R makes rank R SIGKILL itself there;
// SHARDCAST_TEST_CORRUPT=1 (2) makes the last rank of a group send a wrong first element in every
// all-gather (reduce-scatter and all-reduce).
#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <mpi.h>

#include "backend_cpu/mpi_session.hpp"
#include "executor/backend.hpp"

namespace shardcast::cpu {

inline constexpr const char* kComputeNote =
    "Eigen fp32 GEMMs on the CPU (the plan's bf16 is computed in fp32); attention as FLOP-equivalent "
    "batched GEMMs; elementwise ops as memory traffic; collectives move the payload's real bytes (2-byte dtypes "
    "reduced as bf16), averaged over the group";

// Eigen's SIMD instruction sets in use ("SSE, SSE2, AVX, ...") and its thread count.
std::string eigenSimd();
int eigenThreads();

class CpuBackend final : public exec::Backend {
public:
    CpuBackend(const MpiSession& session, bool verify);
    ~CpuBackend() override;
    CpuBackend(const CpuBackend&) = delete;
    CpuBackend& operator=(const CpuBackend&) = delete;

    std::string_view name() const override { return "cpu"; }
    int32_t rank() const override { return m_session.rank(); }
    int32_t worldSize() const override { return m_session.worldSize(); }
    core::Status prepare(const core::Program& program) override;
    void* allocate(int64_t bytes) override;
    void release(void* ptr, int64_t bytes) noexcept override;
    core::Status runTask(const core::Program& program, int32_t id, int32_t step) override;
    core::Status barrier() override;
    void abortRun(const core::Error& error) noexcept override;

    // Collectives whose result was checked on this rank, and their elements; read after the run.
    int64_t collectivesVerified() const;
    int64_t elementsVerified() const;

private:
    struct Scratch {
        std::vector<float> a, b, c;
        std::vector<float> send, recv;
        std::vector<uint16_t> send16, recv16;
        std::vector<char> src, dst;
    };
    static constexpr int kP2PKey = core::kStreamCount;  // m_groups' stream slot for pipeline P2P
    struct PendingSend {
        MPI_Request request = MPI_REQUEST_NULL;
        std::vector<unsigned char> data;
    };
    // Communicator of (stream, group) and the world ranks of its members in communicator order.
    struct Group {
        MPI_Comm comm = MPI_COMM_NULL;
        std::vector<int32_t> members;
    };
    core::Status compute(const core::Program& program, int32_t id, Scratch& s);
    core::Status collective(const core::Program& program, int32_t id, Scratch& s);
    core::Status tpCollective(const core::Program& program, int32_t id, const core::OpShape& op, Scratch& s);
    core::Status runOn(const core::Program& program, int32_t id, const core::Task& t, const Group& g, Scratch& s, bool mean);
    // Pipeline P2P: a send is posted with MPI_Isend from a buffer of its own and ends at once (as
    // torch's batched isend: the receiver's wait is the one that blocks), completed later; a
    // receive waits for its data and, with --verify, checks it.
    core::Status p2p(const core::Program& program, int32_t id, Scratch& s);
    core::Status completeSends(std::vector<PendingSend>& sends, bool wait_all);

    const MpiSession& m_session;
    bool m_verify;
    std::map<std::pair<int, int32_t>, Group> m_groups;
    std::array<Scratch, core::kStreamCount> m_scratch;  // each used by its stream's worker only
    std::array<int64_t, core::kStreamCount> m_verified_per_stream{};  // each written by its stream's worker
    std::array<int64_t, core::kStreamCount> m_elements_per_stream{};
    MPI_Op m_bf16_sum = MPI_OP_NULL;
    // Per stream: used by that P2P stream's worker, and by barrier() between steps.
    std::array<std::vector<PendingSend>, core::kStreamCount> m_sends;
    int32_t m_fail_rank = -1, m_kill_rank = -1;
    int32_t m_corrupt = 0;
};

}  // namespace shardcast::cpu
