#include "backend_cpu/cpu_backend.hpp"

#include <algorithm>
#include <climits>
#include <limits>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <new>
#include <numeric>
#include <string>

#include <Eigen/Core>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "backend_cpu/mpi_wait.hpp"
#include "core/base/verify_data.hpp"
#include "core/results/compare.hpp"

namespace shardcast::cpu {
namespace {

// Grows a scratch vector to `n` elements; new elements are zero (so their pages are touched
// once, and GEMMs never meet denormals or NaNs).
template <class T>
T* grow(std::vector<T>& v, int64_t n) {
    if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n), T{});
    return v.data();
}

// C[m, n] = A[m, k] B[k, n], `batch` times.
void gemm(float* a, float* b, float* c, int64_t m, int64_t n, int64_t k, int64_t batch) {
    using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic>;
    Eigen::Map<Matrix> A(a, m, k), B(b, k, n), C(c, m, n);
    for (int64_t i = 0; i < batch; ++i) C.noalias() = A * B;
}

// Verify data and bf16 conversions: core/base/verify_data.hpp (shared with the CUDA backend).
using core::verify::fromBf16;
using core::verify::gradValue;
using core::verify::paramValue;
using core::verify::toBf16;

// MPI_Op: inout[i] = bf16(in[i] + inout[i]).
void bf16Sum(void* in, void* inout, int* len, MPI_Datatype*) {
    const auto* a = static_cast<const uint16_t*>(in);
    auto* b = static_cast<uint16_t*>(inout);
    for (int i = 0; i < *len; ++i) b[i] = toBf16(fromBf16(a[i]) + fromBf16(b[i]));
}

struct F32Codec : core::verify::F32Values {
    static MPI_Datatype type() { return MPI_FLOAT; }
};
struct Bf16Codec : core::verify::Bf16Values {
    static MPI_Datatype type() { return MPI_UINT16_T; }
};

struct CollectiveCall {
    const core::Program& program;
    int32_t id;
    const core::Task& task;
    MPI_Comm comm;
    const std::vector<int32_t>& members;
    int32_t rank;
    bool verify;
    int32_t corrupt;  // test hook: 1 all-gathers, 2 reductions send a wrong first element from the last member
    MPI_Op sum;
    // FSDP's reductions deliver the mean over the group (its gradient divide factors); a
    // tensor-parallel reduction delivers the sum of the partial results.
    bool mean = true;
};

// One collective of `total` elements of Codec::T (the gathered / reduced size S). Sets `checked`
// to the elements verified (0 when not verifying).
template <class Codec>
core::Status runCollective(const CollectiveCall& c, int64_t total, std::vector<typename Codec::T>& sendv,
                           std::vector<typename Codec::T>& recvv, int64_t& checked) {
    using T = typename Codec::T;
    checked = 0;
    const core::TaskKind kind = c.task.kind;
    const auto members = static_cast<int64_t>(c.members.size());
    const int64_t count = kind == core::TaskKind::AllReduce ? total : total / members;  // per rank
    if (count <= 0) return core::Ok{};
    if (count > INT32_MAX) {
        return core::makeError("collective of " + std::to_string(count) + " elements per rank exceeds MPI's int count");
    }
    const int n = static_cast<int>(count);
    const int64_t send_elems = kind == core::TaskKind::ReduceScatter ? count * members : count;
    const int64_t recv_elems = kind == core::TaskKind::AllGather ? count * members : count;
    T* send = grow(sendv, send_elems);
    T* recv = grow(recvv, recv_elems);
    const int32_t unit = std::max(c.task.unit, 0);
    int64_t position = 0;  // this rank's place in the group
    while (c.members[static_cast<size_t>(position)] != c.rank) ++position;
    if (c.verify) {
        if (kind == core::TaskKind::AllGather) {
            for (int64_t i = 0; i < count; ++i) send[i] = Codec::enc(paramValue(unit, position * count + i));
            if (c.corrupt == 1 && position == members - 1) send[0] = Codec::enc(paramValue(unit, position * count) + 1.0f);
        } else {
            for (int64_t i = 0; i < send_elems; ++i) send[i] = Codec::enc(gradValue(unit, c.rank, i, members));
            if (c.corrupt == 2 && position == members - 1) send[0] = Codec::enc(gradValue(unit, c.rank, 0, members) + 64.0f);
        }
        std::fill(recv, recv + recv_elems, Codec::enc(-1.0f));
    }
    MPI_Request request = MPI_REQUEST_NULL;
    const char* call = "MPI_Iallreduce";
    int code = MPI_SUCCESS;
    switch (kind) {
        case core::TaskKind::AllGather:
            call = "MPI_Iallgather";
            code = MPI_Iallgather(send, n, Codec::type(), recv, n, Codec::type(), c.comm, &request);
            break;
        case core::TaskKind::ReduceScatter:
            call = "MPI_Ireduce_scatter_block";
            code = MPI_Ireduce_scatter_block(send, recv, n, Codec::type(), c.sum, c.comm, &request);
            break;
        default:
            code = MPI_Iallreduce(send, recv, n, Codec::type(), c.sum, c.comm, &request);
            break;
    }
    core::Status called = mpiCheck(code, call, c.rank);
    if (called) called = waitPolitely(request, call, c.rank);
    if (!called) return called;
    if (kind != core::TaskKind::AllGather && c.mean) {  // the mean over the group, as FSDP's divide factors
        const auto divisor = static_cast<float>(members);
        for (int64_t i = 0; i < recv_elems; ++i) recv[i] = Codec::enc(Codec::dec(recv[i]) / divisor);
    }
    if (!c.verify) return core::Ok{};

    const int64_t offset = kind == core::TaskKind::ReduceScatter ? position * count : 0;
    for (int64_t i = 0; i < recv_elems; ++i) {
        T want{};
        if (kind == core::TaskKind::AllGather) {
            want = Codec::enc(paramValue(unit, i));
        } else {
            float sum = 0;
            for (int32_t member : c.members) sum += gradValue(unit, member, offset + i, members);
            want = Codec::enc(c.mean ? sum / static_cast<float>(members) : sum);
        }
        if (recv[i] == want) continue;
        // FSDP's collectives move parameters and gradients; a tensor-parallel one (c.mean false)
        // activations or their gradients, which the verify data stands in for alike.
        const char* moved = c.mean ? "gradient" : "tensor-parallel partial sums";
        const std::string what =
            kind == core::TaskKind::AllGather
                ? fmt::format("element {} of the all-gathered {}", i, c.mean ? "parameters" : "tensor-parallel shards")
                : fmt::format("element {} of the {} {} (element {} of the buffer)", i,
                              kind == core::TaskKind::ReduceScatter ? "reduce-scattered shard of the" : "all-reduced",
                              moved, offset + i);
        const std::string rule = kind == core::TaskKind::AllGather
                                     ? "the original values, the same on every rank"
                                     : fmt::format("the {} over ranks [{}] of their {}", c.mean ? "mean" : "sum",
                                                   fmt::join(c.members, ","), c.mean ? "gradients" : "partial sums");
        return core::makeError(fmt::format("verify failed for unit {} on rank {} ({}, task {}): {} is {}, expected {} ({})",
                                           core::taskUnitName(c.program, c.id), c.rank, c.program.taskLabel(c.id), c.id,
                                           what, Codec::show(recv[i]), Codec::show(want), rule));
    }
    checked = recv_elems;
    return core::Ok{};
}

}  // namespace

std::string eigenSimd() { return Eigen::SimdInstructionSetsInUse(); }
int eigenThreads() { return Eigen::nbThreads(); }

CpuBackend::CpuBackend(const MpiSession& session, bool verify) : m_session(session), m_verify(verify) {
    auto envRank = [](const char* name) -> int32_t {
        const char* v = std::getenv(name);
        return v != nullptr && *v != '\0' ? static_cast<int32_t>(std::strtol(v, nullptr, 10)) : -1;
    };
    m_fail_rank = envRank("SHARDCAST_TEST_FAIL_RANK");
    m_kill_rank = envRank("SHARDCAST_TEST_KILL_RANK");
    m_corrupt = std::max(envRank("SHARDCAST_TEST_CORRUPT"), 0);
}

CpuBackend::~CpuBackend() {
    for (auto& [key, group] : m_groups) {
        if (group.comm != MPI_COMM_NULL) MPI_Comm_free(&group.comm);
    }
    if (m_bf16_sum != MPI_OP_NULL) MPI_Op_free(&m_bf16_sum);
}

core::Status CpuBackend::prepare(const core::Program& program) {
    // Every rank splits the same (stream, group) pairs in the same order: MPI_Comm_split is
    // collective over MPI_COMM_WORLD.
    if (m_bf16_sum == MPI_OP_NULL) {
        if (auto s = mpiCheck(MPI_Op_create(&bf16Sum, /*commute=*/1, &m_bf16_sum), "MPI_Op_create", rank()); !s) return s;
    }
    std::vector<std::pair<int, int32_t>> needed;
    for (const core::Task& t : program.tasks) {
        if (core::isCollective(t.kind)) needed.emplace_back(static_cast<int>(t.stream), t.group);
        // Pipeline P2P: one communicator for both neighbours' streams, so that a send and its
        // receive (on the other stream of the other stage) meet on it; every stage has one.
        if (core::isP2P(t.kind)) needed.emplace_back(kP2PKey, t.group);
        // Tensor-parallel collectives inside compute tasks: on the task's stream, their own group.
        const core::OpShape* ops = program.opsBegin(t);
        for (uint32_t i = 0; i < t.ops.count; ++i)
            if (core::isTpCollective(ops[i].kind)) needed.emplace_back(static_cast<int>(t.stream), ops[i].group);
    }
    std::sort(needed.begin(), needed.end());
    needed.erase(std::unique(needed.begin(), needed.end()), needed.end());
    for (const auto& key : needed) {
        if (m_groups.count(key) != 0) continue;
        std::vector<int32_t> members = core::groupRanks(program, key.second, rank());
        if (members.empty()) {
            return core::makeError("process group " + std::to_string(key.second) + " of the Program has no instance holding rank " +
                                   std::to_string(rank()) + " (world size " + std::to_string(worldSize()) + ")");
        }
        Group g;
        if (auto s = mpiCheck(MPI_Comm_split(MPI_COMM_WORLD, members.front(), rank(), &g.comm), "MPI_Comm_split", rank()); !s) {
            return s;
        }
        MPI_Comm_set_errhandler(g.comm, MPI_ERRORS_RETURN);
        int size = 0;
        MPI_Comm_size(g.comm, &size);
        if (size != static_cast<int>(members.size())) {
            return core::makeError("rank " + std::to_string(rank()) + ": the communicator of " +
                                   std::string(core::groupKindName(program.groups[static_cast<size_t>(key.second)].kind)) +
                                   " group has " + std::to_string(size) + " ranks, the Program says " +
                                   std::to_string(members.size()));
        }
        g.members = std::move(members);
        m_groups.emplace(key, std::move(g));
    }
    return core::Ok{};
}

void* CpuBackend::allocate(int64_t bytes) {
    void* p = std::malloc(static_cast<size_t>(bytes));
    if (p == nullptr) throw std::bad_alloc();
    std::memset(p, 0, static_cast<size_t>(bytes));  // resident, as device memory is
    return p;
}

void CpuBackend::release(void* ptr, int64_t) noexcept { std::free(ptr); }

int64_t CpuBackend::collectivesVerified() const {
    return std::accumulate(m_verified_per_stream.begin(), m_verified_per_stream.end(), int64_t{0});
}

int64_t CpuBackend::elementsVerified() const {
    return std::accumulate(m_elements_per_stream.begin(), m_elements_per_stream.end(), int64_t{0});
}

core::Status CpuBackend::barrier() {
    // Every receive of the step has run on every rank, so every send posted can complete.
    for (std::vector<PendingSend>& sends : m_sends) {
        if (auto done = completeSends(sends, true); !done) return done;
    }
    return mpiCheck(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier", rank());
}

core::Status CpuBackend::completeSends(std::vector<PendingSend>& sends, bool wait_all) {
    for (PendingSend& p : sends) {
        if (p.request == MPI_REQUEST_NULL) continue;
        int done = 0;
        if (wait_all) {
            if (auto s = waitPolitely(p.request, "MPI_Isend", rank()); !s) return s;
        } else if (auto s = mpiCheck(MPI_Test(&p.request, &done, MPI_STATUS_IGNORE), "MPI_Test", rank()); !s) {
            return s;
        }
    }
    std::erase_if(sends, [](const PendingSend& p) { return p.request == MPI_REQUEST_NULL; });
    return core::Ok{};
}

core::Status CpuBackend::p2p(const core::Program& program, int32_t id, Scratch& s) {
    const core::Task& t = program.tasks[static_cast<size_t>(id)];
    auto found = m_groups.find({kP2PKey, t.group});
    if (found == m_groups.end()) return core::makeError("no communicator was prepared for the pipeline's P2P group");
    const Group& g = found->second;
    // The pipeline stages at both ends (Interleaved1F1B: a rank holds several, Task::chunk), and
    // the peer's place in the pipeline group: its rank, the stage's modulo pp (wrapping around).
    const int32_t own_stage = program.stageOf(t), peer_stage = own_stage + t.peer;
    const int32_t from_stage = t.kind == core::TaskKind::Send ? own_stage : peer_stage;
    const int32_t peer = peer_stage % program.pp_size;
    const bool activations = (t.kind == core::TaskKind::Send) == (t.peer > 0);
    // Two stages of one rank may send the same micro-batch in one direction to one rank (pp 2):
    // the sending stage's place on its rank tells them apart.
    const int tag = ((t.micro_batch * 2 + (activations ? 0 : 1)) * program.pp_virtual) + from_stage / program.pp_size;
    const uint32_t seed = core::verify::p2pSeed(from_stage, t.micro_batch, activations);
    const int64_t bytes = t.comm_bytes;
    if (bytes > std::numeric_limits<int>::max()) {
        return core::makeError(fmt::format("{} moves {} bytes, more than one MPI message holds", program.taskLabel(id), bytes));
    }
    if (t.kind == core::TaskKind::Send) {
        std::vector<PendingSend>& sends = m_sends[static_cast<size_t>(t.stream)];
        if (auto done = completeSends(sends, false); !done) return done;
        PendingSend& p = sends.emplace_back();
        p.data.resize(static_cast<size_t>(bytes));
        for (int64_t i = 0; i < bytes; ++i) p.data[static_cast<size_t>(i)] = core::verify::p2pByte(seed, i);
        if (m_corrupt == 3 && program.pp_stage == program.pp_size - 1 && bytes > 0) p.data[0] ^= 0x5a;
        return mpiCheck(MPI_Isend(p.data.data(), static_cast<int>(bytes), MPI_BYTE, peer, tag, g.comm, &p.request),
                        "MPI_Isend", rank());
    }
    unsigned char* buf = reinterpret_cast<unsigned char*>(grow(s.dst, bytes));
    MPI_Request request = MPI_REQUEST_NULL;
    if (auto posted = mpiCheck(MPI_Irecv(buf, static_cast<int>(bytes), MPI_BYTE, peer, tag, g.comm, &request), "MPI_Irecv", rank());
        !posted) {
        return posted;
    }
    if (auto waited = waitPolitely(request, "MPI_Irecv", rank()); !waited) return waited;
    if (!m_verify) return core::Ok{};
    for (int64_t i = 0; i < bytes; ++i) {
        const unsigned char want = core::verify::p2pByte(seed, i);
        if (buf[i] == want) continue;
        return core::makeError(fmt::format("verify failed: byte {} of the {} received from stage {} (rank {}) is {}, "
                                           "expected {} (what stage {} sends for micro-batch {})",
                                           i, activations ? "activations" : "input gradients", from_stage,
                                           g.members[static_cast<size_t>(peer)], int{buf[i]}, int{want}, from_stage, t.micro_batch));
    }
    ++m_verified_per_stream[static_cast<size_t>(t.stream)];
    m_elements_per_stream[static_cast<size_t>(t.stream)] += bytes;
    return core::Ok{};
}

void CpuBackend::abortRun(const core::Error& error) noexcept { m_session.abort(error.message); }

core::Status CpuBackend::runTask(const core::Program& program, int32_t id, int32_t) {
    const core::Task& t = program.tasks[static_cast<size_t>(id)];
    Scratch& s = m_scratch[static_cast<size_t>(t.stream)];
    if (core::isCollective(t.kind)) return collective(program, id, s);
    if (core::isP2P(t.kind)) return p2p(program, id, s);
    if (t.ops.count > 0 && rank() == m_kill_rank) std::raise(SIGKILL);  // test hook: a rank dies mid-step
    if (t.ops.count > 0 && rank() == m_fail_rank) {
        return core::makeError("injected failure (test hook SHARDCAST_TEST_FAIL_RANK=" + std::to_string(m_fail_rank) + ")");
    }
    if (t.ops.count > 0) return compute(program, id, s);
    if (t.comm_bytes > 0) {  // host <-> device copies: the bytes moved, as memory traffic
        std::memcpy(grow(s.dst, t.comm_bytes), grow(s.src, t.comm_bytes), static_cast<size_t>(t.comm_bytes));
    }
    return core::Ok{};
}

core::Status CpuBackend::compute(const core::Program& program, int32_t id, Scratch& s) {
    const core::Task& task = program.tasks[static_cast<size_t>(id)];
    const core::OpShape* ops = program.opsBegin(task);
    for (uint32_t i = 0; i < task.ops.count; ++i) {
        const core::OpShape& op = ops[i];
        switch (op.kind) {
            case core::OpShapeKind::Gemm:
                gemm(grow(s.a, op.m * op.k), grow(s.b, op.k * op.n), grow(s.c, op.m * op.n), op.m, op.n, op.k,
                     std::max<int64_t>(op.batch, 1));
                break;
            case core::OpShapeKind::Attention:
            case core::OpShapeKind::AttentionBackward: {
                // Per sequence and head: scores [s, d] x [d, s] and values [s, s] x [s, d], 4 s^2 d
                // FLOPs as opFlops counts them; the backward twice that.
                const int64_t seq = op.seq, d = op.head_dim;
                const int64_t products = std::max<int64_t>(op.batch, 1) * op.heads *
                                         (op.kind == core::OpShapeKind::AttentionBackward ? 2 : 1);
                float* q = grow(s.a, seq * std::max(seq, d));
                float* k = grow(s.b, seq * std::max(seq, d));
                float* out = grow(s.c, seq * std::max(seq, d));
                gemm(q, k, out, seq, seq, d, products);
                gemm(out, k, q, seq, d, seq, products);
                break;
            }
            case core::OpShapeKind::Elementwise: {
                const int64_t half = op.bytes / 2;  // read half, write half
                if (half > 0) std::memcpy(grow(s.dst, half), grow(s.src, half), static_cast<size_t>(half));
                break;
            }
            case core::OpShapeKind::TpAllGather:
            case core::OpShapeKind::TpReduceScatter:
            case core::OpShapeKind::TpAllReduce:
                if (auto done = tpCollective(program, id, op, s); !done) return done;
                break;
        }
    }
    return core::Ok{};
}

// A tensor-parallel collective inside compute task `id`: run as a collective of its kind, size and
// group on the task's stream, summing partial results; --verify checks what it delivers.
core::Status CpuBackend::tpCollective(const core::Program& program, int32_t id, const core::OpShape& op, Scratch& s) {
    const core::Task& host = program.tasks[static_cast<size_t>(id)];
    auto found = m_groups.find({static_cast<int>(host.stream), op.group});
    if (found == m_groups.end()) return core::makeError("no communicator was prepared for a tensor-parallel collective's group");
    // The collective as a task of its own, for the shared code path and its messages.
    return runOn(program, id, core::tpCollectiveTask(host, op), found->second, s, /*mean=*/false);
}

core::Status CpuBackend::runOn(const core::Program& program, int32_t id, const core::Task& t, const Group& g, Scratch& s,
                               bool mean) {
    CollectiveCall call{program, id, t, g.comm, g.members, rank(), m_verify, m_corrupt, MPI_SUM, mean};
    int64_t checked = 0;
    core::Status done = core::Ok{};
    if (core::itemSize(t.dtype) == 2) {
        call.sum = m_bf16_sum;
        done = runCollective<Bf16Codec>(call, t.comm_bytes / 2, s.send16, s.recv16, checked);
    } else {
        done = runCollective<F32Codec>(call, t.comm_bytes / 4, s.send, s.recv, checked);
    }
    if (done && checked > 0) {
        ++m_verified_per_stream[static_cast<size_t>(t.stream)];
        m_elements_per_stream[static_cast<size_t>(t.stream)] += checked;
    }
    return done;
}

core::Status CpuBackend::collective(const core::Program& program, int32_t id, Scratch& s) {
    const core::Task& t = program.tasks[static_cast<size_t>(id)];
    auto found = m_groups.find({static_cast<int>(t.stream), t.group});
    if (found == m_groups.end()) return core::makeError("no communicator was prepared for this collective's group");
    return runOn(program, id, t, found->second, s, /*mean=*/true);
}

}  // namespace shardcast::cpu
