#pragma once
#include <memory>

#include "core/base/result.hpp"
#include "core/plan/plan.hpp"
#include "core/program/program.hpp"

namespace shardcast::core {

// Lowers a validated plan into `out` (cleared first; its capacity is reused, so lowering many
// plans into one Program allocates little). Follows DESIGN.md section 3 rule by rule; where each
// rule lives is listed in core/lower/lower_internal.hpp. The result satisfies validateProgram.
// With pipeline parallelism (mesh.pp > 1) each stage has its own Program; lower() gives the first
// stage's, Lowerer::lowerStage any stage's.
Status lower(const Plan& plan, const Mesh& mesh, Program& out);

struct LowerScratch;

// Keeps its scratch memory between calls: one per thread when lowering many plans.
class Lowerer {
public:
    Lowerer();
    ~Lowerer();
    Lowerer(Lowerer&&) noexcept;
    Lowerer& operator=(Lowerer&&) noexcept;
    // pp > 1: lower() lowers the first stage; lowerStage any (each rank runs its stage's Program).
    Status lower(const Plan& plan, const Mesh& mesh, Program& out);
    Status lowerStage(const Plan& plan, const Mesh& mesh, int stage, Program& out);

private:
    std::unique_ptr<LowerScratch> m_scratch;
};

}  // namespace shardcast::core
