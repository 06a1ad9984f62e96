// A step of long gradient accumulation simulated by its period (Evaluator::evaluateByPeriod) gives
// the figures of the whole step simulated micro-batch by micro-batch: time per stream, collective
// and unit, MFU, throughput, communication bytes, the allocated and reserved peaks with their task,
// and the fit verdict. The whole-step evaluation is the reference each case is held against.
#include <cmath>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "core/model/model_io.hpp"
#include "simulator/evaluation.hpp"
#include "tests/simulator/test_plan.hpp"

namespace shardcast::sim {
namespace {

core::Plan planOf(const char* model, int nodes, int64_t seq_len, int64_t micro_batches) {
    core::Plan plan = testing::h100Plan(model, nodes, seq_len);
    plan.training.grad_accum = micro_batches;
    return plan;
}

void expectNear(double expected, double got, const char* what) {
    EXPECT_NEAR(got, expected, 1e-9 * std::max(1.0, std::abs(expected))) << what;
}

// Evaluates `plan` whole and by its period and holds every reported figure of the second against
// the first.
void expectPeriodGivesTheWholeStep(const core::Plan& plan, const std::string& name) {
    SCOPED_TRACE(name);
    Evaluator whole_evaluator, period_evaluator;
    Evaluation whole, period;
    EvaluationOptions options;
    ASSERT_TRUE(whole_evaluator.evaluate(plan, nullptr, options, whole).ok());
    EXPECT_FALSE(whole.period.byPeriod());
    options.period_over = kPeriodOver;
    ASSERT_TRUE(period_evaluator.evaluate(plan, nullptr, options, period).ok());
    ASSERT_TRUE(period.period.byPeriod()) << "no period found";
    EXPECT_EQ(period.period.micro_batches, plan.training.grad_accum);
    EXPECT_LT(period.period.simulated, plan.training.grad_accum);
    EXPECT_EQ(period.program.micro_batches, period.period.simulated);

    const core::StepSummary &w = whole.summary, &p = period.summary;
    EXPECT_EQ(w.step_s, p.step_s);  // from the same integer nanoseconds
    EXPECT_EQ(w.compute_s, p.compute_s);
    EXPECT_EQ(w.exposed_comm_s, p.exposed_comm_s);
    EXPECT_EQ(w.all_gather_s, p.all_gather_s);
    EXPECT_EQ(w.reduce_scatter_s, p.reduce_scatter_s);
    EXPECT_EQ(w.all_reduce_s, p.all_reduce_s);
    EXPECT_EQ(w.stream_busy_s, p.stream_busy_s);
    EXPECT_EQ(w.units, p.units);
    expectNear(w.mfu, p.mfu, "mfu");
    expectNear(w.hfu, p.hfu, "hfu");
    expectNear(w.tokens_per_s_per_gpu, p.tokens_per_s_per_gpu, "tokens/s");
    expectNear(whole.program.model_flops_per_step, period.program.model_flops_per_step, "model FLOPs");
    expectNear(whole.program.hardware_flops_per_step, period.program.hardware_flops_per_step, "hardware FLOPs");
    EXPECT_EQ(whole.comm, period.comm);

    EXPECT_EQ(w.peak_bytes, p.peak_bytes);
    EXPECT_EQ(w.at_peak, p.at_peak);
    ASSERT_GE(w.peak_task, 0);
    EXPECT_EQ(whole.program.taskLabel(w.peak_task), period.program.taskLabel(p.peak_task));
    EXPECT_EQ(whole.timed.max_per_category, period.timed.max_per_category);
    EXPECT_EQ(whole.memory.model_states.optimizer, period.memory.model_states.optimizer);
    EXPECT_EQ(whole.reserved, period.reserved);
    EXPECT_EQ(whole.fit.fits, period.fit.fits);
    EXPECT_EQ(whole.fit.judgedBytes(), period.fit.judgedBytes());
    EXPECT_EQ(whole.fit.at_risk, period.fit.at_risk);
}

TEST(PeriodicStepTest, LlamaEightBMatchesTheWholeStep) {
    expectPeriodGivesTheWholeStep(planOf("llama-3.1-8b", 1, 4096, 40), "8B, 40 micro-batches");
}

TEST(PeriodicStepTest, VariantsMatchTheWholeStep) {
    {
        core::Plan plan = planOf("llama-3.1-8b", 2, 2048, 24);
        plan.training.ac = core::Checkpointing::Full;
        expectPeriodGivesTheWholeStep(plan, "8B, full AC, 2 nodes, 24 micro-batches");
    }
    {
        core::Plan plan = planOf("llama-3.1-8b", 1, 2048, 20);
        plan.training.no_sync = true;
        expectPeriodGivesTheWholeStep(plan, "8B, no_sync, 20 micro-batches");
    }
    {
        core::Plan plan = planOf("llama-3.1-8b", 1, 4096, 33);
        plan.sharding.reshard_after_forward = core::ReshardMode::False;
        expectPeriodGivesTheWholeStep(plan, "8B, reshard_after_forward false, 33 micro-batches");
    }
    {
        core::Plan plan = planOf("llama-3.1-70b", 4, 4096, 17);
        plan.training.ac = core::Checkpointing::Full;
        plan.sharding.strategy = core::Strategy::HybridShard;
        expectPeriodGivesTheWholeStep(plan, "70B, HSDP over 4 nodes, 17 micro-batches");
    }
    {
        core::Plan plan = planOf("gpt2", 1, 1024, 64);
        plan.sharding.strategy = core::Strategy::ShardGradOp;
        expectPeriodGivesTheWholeStep(plan, "GPT-2, ZeRO-2, 64 micro-batches");
    }
}

// The step's last micro-batch stands for micro-batch N - 1 in every label: a peak reached there
// names the same task in both evaluations (checked above), and the earlier ones keep their numbers.
TEST(PeriodicStepTest, TheLastSimulatedMicroBatchIsLabelledAsTheStepsLast) {
    Evaluator evaluator;
    Evaluation e;
    EvaluationOptions options;
    options.period_over = kPeriodOver;
    ASSERT_TRUE(evaluator.evaluate(planOf("llama-3.1-8b", 1, 4096, 100), nullptr, options, e).ok());
    ASSERT_TRUE(e.period.byPeriod());
    const int last = e.program.micro_batches - 1;
    bool saw_last = false, saw_first = false;
    for (int32_t id = 0; id < e.program.size(); ++id) {
        const std::string label = e.program.taskLabel(id);
        const int mb = e.program.tasks[static_cast<size_t>(id)].micro_batch;
        if (mb == last) {
            saw_last = true;
            EXPECT_TRUE(label.ends_with(" mb99")) << label;
        } else {
            saw_first |= mb == 0;
            EXPECT_TRUE(label.ends_with(" mb" + std::to_string(mb))) << label;
        }
    }
    EXPECT_TRUE(saw_last);
    EXPECT_TRUE(saw_first);
    // Worked by hand from the figures above: each repeat adds the period to the step.
    Evaluator whole_evaluator;
    Evaluation at_99, at_100;
    core::Plan plan = planOf("llama-3.1-8b", 1, 4096, 99);
    ASSERT_TRUE(whole_evaluator.evaluate(plan, nullptr, {}, at_99).ok());
    plan.training.grad_accum = 100;
    ASSERT_TRUE(whole_evaluator.evaluate(plan, nullptr, {}, at_100).ok());
    EXPECT_EQ(e.period.period_ns, at_100.timeline.step_ns - at_99.timeline.step_ns);
}

// At or below the threshold, and without it, the step is simulated whole.
TEST(PeriodicStepTest, ShortStepsAndRunsAreSimulatedWhole) {
    Evaluator evaluator;
    Evaluation e;
    EvaluationOptions options;
    options.period_over = kPeriodOver;
    ASSERT_TRUE(evaluator.evaluate(planOf("llama-3.1-8b", 1, 4096, kPeriodOver), nullptr, options, e).ok());
    EXPECT_FALSE(e.period.byPeriod());
    EXPECT_EQ(e.program.micro_batches, kPeriodOver);
    options.period_over = 0;
    ASSERT_TRUE(evaluator.evaluate(planOf("llama-3.1-8b", 1, 4096, 40), nullptr, options, e).ok());
    EXPECT_FALSE(e.period.byPeriod());
    EXPECT_EQ(e.program.micro_batches, 40);
    EXPECT_EQ(e.program.step_micro_batches, 0);
}

}  // namespace
}  // namespace shardcast::sim
