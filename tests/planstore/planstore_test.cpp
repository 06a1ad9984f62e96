// The planning chains that touch the store (planstore/planstore.hpp): a prediction saved and loaded
// again is the same prediction; profiles resolve by name, file or preset; errors name what is missing.
#include "planstore/planstore.hpp"

#include <string>

#include <gtest/gtest.h>

#include "core/plan/plan.hpp"
#include "tests/db/temp_store.hpp"

namespace {

using namespace shardcast;
using db::testing::TempDir;

const std::string kExample = SHARDCAST_SOURCE_DIR "/examples/llama-3.1-8b-8xh100.json";

core::Plan examplePlan() {
    auto plan = core::loadPlanFile(kExample);
    EXPECT_TRUE(plan.ok()) << (plan.ok() ? "" : plan.error().message);
    return *plan;
}

TEST(PlanstoreTest, ASavedPredictionLoadsBackAsItWasMade) {
    TempDir dir;
    auto store = db::Store::open(dir / "store.db");
    ASSERT_TRUE(store.ok()) << store.error().message;
    const core::Plan plan = examplePlan();
    auto resolved = planstore::resolveProfile(plan.cluster, "", dir / "store.db");
    ASSERT_TRUE(resolved.ok()) << resolved.error().message;
    EXPECT_EQ(resolved->source, "preset");
    sim::HardwareProfile slow = resolved->profile;
    slow.forward_efficiency_max *= 0.5;  // a profile that is not the preset's, so the link must be followed
    auto saved_profile = planstore::saveCalibratedProfile(**store, slow, "half-speed");
    ASSERT_TRUE(saved_profile.ok()) << saved_profile.error().message;
    auto by_name = planstore::resolveProfile(plan.cluster, "half-speed", dir / "store.db");
    ASSERT_TRUE(by_name.ok()) << by_name.error().message;
    EXPECT_EQ(by_name->profile.forward_efficiency_max, slow.forward_efficiency_max);

    sim::EvaluationOptions options;
    options.record_curve = true;
    sim::Evaluation e;
    sim::Evaluator evaluator;
    ASSERT_TRUE(evaluator.evaluate(plan, &by_name->profile, options, e).ok());
    auto saved = planstore::savePrediction(**store, plan, e, *by_name, "p");
    ASSERT_TRUE(saved.ok()) << saved.error().message;

    auto loaded = planstore::loadStoredPrediction(**store, saved->prediction);
    ASSERT_TRUE(loaded.ok()) << loaded.error().message;
    // The same plan and the stored (half-speed) profile, re-lowered to the same Program.
    EXPECT_EQ(loaded->profile.forward_efficiency_max, slow.forward_efficiency_max);
    EXPECT_EQ(loaded->plan.training.micro_batch, plan.training.micro_batch);
    EXPECT_EQ(loaded->evaluation.program.tasks.size(), e.program.tasks.size());
    // The timeline and memory as stored: the same step and peak the evaluation made.
    ASSERT_EQ(loaded->timeline.tasks.size(), e.timeline.tasks.size());
    EXPECT_EQ(loaded->timeline.step_ns, e.timeline.step_ns);
    EXPECT_EQ(loaded->evaluation.timeline.step_ns, e.timeline.step_ns);
    EXPECT_EQ(loaded->memory.peak_bytes, e.timed.peak_bytes);
}

TEST(PlanstoreTest, ErrorsNameTheStoreAndWhatIsValid) {
    TempDir dir;
    auto store = db::Store::open(dir / "store.db");
    ASSERT_TRUE(store.ok()) << store.error().message;
    const core::Plan plan = examplePlan();
    auto preset = planstore::resolveProfile(plan.cluster, "", dir / "store.db");
    ASSERT_TRUE(preset.ok());
    ASSERT_TRUE(planstore::saveCalibratedProfile(**store, preset->profile, "lab-a").ok());

    auto missing = planstore::resolveProfile(plan.cluster, "lab-b", dir / "store.db");
    ASSERT_FALSE(missing.ok());
    EXPECT_NE(missing.error().message.find("lab-b"), std::string::npos) << missing.error().message;
    EXPECT_NE(missing.error().message.find("lab-a"), std::string::npos) << missing.error().message;

    auto absent = planstore::loadStoredPrediction(**store, db::ObjectId{db::Kind::prediction, 99});
    ASSERT_FALSE(absent.ok());
    EXPECT_NE(absent.error().message.find("pred-99"), std::string::npos) << absent.error().message;
}

}  // namespace
