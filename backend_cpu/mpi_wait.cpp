#include "backend_cpu/mpi_wait.hpp"

#include <sys/prctl.h>

#include <chrono>
#include <thread>

#include "backend_cpu/mpi_session.hpp"

namespace shardcast::cpu {

core::Status waitPolitely(MPI_Request& request, const char* call, int32_t rank) {
    static thread_local const bool kSlackSet = prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL) == 0;
    (void)kSlackSet;
    for (int tests = 0;; ++tests) {
        int done = 0;
        if (auto s = mpiCheck(MPI_Test(&request, &done, MPI_STATUS_IGNORE), call, rank); !s) return s;
        if (done != 0) return core::Ok{};
        if (tests < 64) continue;
        if (tests < 256) {
            std::this_thread::yield();
        } else {
            std::this_thread::sleep_for(std::chrono::microseconds(20));
        }
    }
}

}  // namespace shardcast::cpu
