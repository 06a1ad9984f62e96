#pragma once
// Test helper: a plan validated and lowered, failing the calling test (not aborting) when either
// step refuses it.
#include <gtest/gtest.h>

#include "core/lower/lower.hpp"
#include "core/plan/plan.hpp"
#include "core/program/program.hpp"

namespace shardcast::core::testing {

inline Program lowered(const Plan& plan) {
    Program p;
    auto mesh = validatePlan(plan);
    EXPECT_TRUE(mesh.ok()) << (mesh.ok() ? "" : mesh.error().message);
    if (!mesh) return p;
    auto st = lower(plan, *mesh, p);
    EXPECT_TRUE(st.ok()) << (st.ok() ? "" : st.error().message);
    return p;
}

}  // namespace shardcast::core::testing
