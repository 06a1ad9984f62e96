#include "search/sweep.hpp"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <set>
#include <thread>

#include "simulator/evaluation.hpp"

namespace shardcast::sim {

std::vector<core::WrapPolicy> wrapCandidates(const core::Model& model) {
    std::vector<core::WrapPolicy> out;
    const int64_t blocks = static_cast<int64_t>(model.blocks.size());
    core::WrapPolicy whole;
    whole.kind = core::WrapKind::Whole;
    out.push_back(whole);
    std::set<int64_t> unit_counts;
    for (int64_t k = blocks - 1; k >= 2; --k) {
        const int64_t units = (blocks + k - 1) / k;
        if (!unit_counts.insert(units).second) continue;  // same unit count as a larger k
        core::WrapPolicy w;
        w.kind = core::WrapKind::EveryK;
        w.k = k;
        out.push_back(w);
    }
    if (blocks > 0) {
        int64_t total = 0;
        for (const auto& p : model.params) total += p.numel();
        const int64_t per_block = total / blocks;
        for (int64_t m : {8, 4, 2, 1}) {
            core::WrapPolicy w;
            w.kind = core::WrapKind::MinParams;
            w.min_params = m * per_block;
            out.push_back(w);
        }
        core::WrapPolicy block;
        block.kind = core::WrapKind::Block;
        out.push_back(block);
    }
    return out;
}

std::vector<SweepCandidate> sweepCandidates(const core::Plan& base, const SweepOptions& options) {
    std::vector<core::Strategy> strategies = options.strategies;
    if (strategies.empty()) {
        strategies = {core::Strategy::NoShard, core::Strategy::ShardGradOp, core::Strategy::FullShard};
        if (base.cluster.nodes > 1) {
            strategies.push_back(core::Strategy::HybridShard);
            strategies.push_back(core::Strategy::HybridShardZero2);
        }
    }
    std::vector<int64_t> mbs = options.micro_batches.empty() ? std::vector<int64_t>{base.training.micro_batch}
                                                             : options.micro_batches;
    std::vector<core::AcSpec> acs = options.acs;
    if (acs.empty()) acs.push_back(core::acSpecOf(base.training));
    const std::vector<core::WrapPolicy> wraps = wrapCandidates(*base.model);
    std::vector<SweepCandidate> out;
    for (core::Strategy s : strategies) {
        for (const auto& w : wraps) {
            for (int64_t mb : mbs) {
                for (const core::AcSpec& ac : acs) out.push_back(SweepCandidate{s, w, mb, ac});
            }
        }
    }
    return out;
}

std::vector<SweepResult> runSweep(const core::Plan& base, const std::vector<SweepCandidate>& candidates,
                                  const HardwareProfile& profile, const SweepOptions& options) {
    std::vector<SweepResult> results(candidates.size());
    std::atomic<size_t> next{0};
    std::atomic<size_t> done{0};
    std::mutex progress_mutex;
    EvaluationOptions eval_options;
    eval_options.headroom = options.headroom;
    eval_options.issue_order_memory = false;
    eval_options.per_unit = false;
    eval_options.cancel = options.cancel;
    eval_options.reserved_memory = false;  // judged below, where it is needed

    auto worker = [&] {
        Evaluator evaluator;
        Evaluation e;
        core::Plan plan = base;
        for (size_t i = next++; i < candidates.size(); i = next++) {
            if (options.cancel && options.cancel->cancelled()) return;
            const SweepCandidate& c = candidates[i];
            SweepResult& r = results[i];
            r.candidate = c;
            applyCandidate(c, plan);
            if (auto s = evaluator.evaluate(plan, &profile, eval_options, e); !s) {
                if (s.error().cancelled) return;
                r.error = s.error().message;
            } else {
                if (options.reserved_for_every_candidate || e.fit.fits) evaluator.judgeReserved(options.headroom, e);
                r.ok = true;
                r.units = static_cast<int>(e.program.units.size());
                r.step_s = e.summary.step_s;
                r.exposed_comm_s = e.summary.exposed_comm_s;
                r.mfu = e.summary.mfu;
                r.tokens_per_s_per_gpu = e.summary.tokens_per_s_per_gpu;
                r.peak_bytes = e.summary.peak_bytes;
                r.reserved_bytes = e.fit.reserved_bytes;
                r.fits = e.fit.fits;
            }
            const size_t d = ++done;
            if (options.progress) {
                std::lock_guard lock(progress_mutex);
                options.progress(d, candidates.size());
            }
        }
    };
    int threads = options.threads > 0 ? options.threads : static_cast<int>(std::thread::hardware_concurrency());
    threads = std::max(1, std::min<int>(threads, static_cast<int>(candidates.size())));
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
    worker();
    for (auto& t : pool) t.join();
    return results;
}

std::vector<size_t> paretoFront(const std::vector<SweepResult>& results) {
    std::vector<size_t> order;
    for (size_t i = 0; i < results.size(); ++i) {
        if (results[i].ok) order.push_back(i);
    }
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        if (results[a].peak_bytes != results[b].peak_bytes) return results[a].peak_bytes < results[b].peak_bytes;
        if (results[a].step_s != results[b].step_s) return results[a].step_s < results[b].step_s;
        return a < b;
    });
    std::vector<size_t> front;
    double best_step = 0;
    for (size_t i : order) {
        if (front.empty() || results[i].step_s < best_step) {
            front.push_back(i);
            best_step = results[i].step_s;
        }
    }
    return front;
}

int64_t recommend(const std::vector<SweepResult>& results) {
    int64_t best = -1;
    for (size_t i = 0; i < results.size(); ++i) {
        const SweepResult& r = results[i];
        if (!r.ok || !r.fits) continue;
        if (best < 0 || r.step_s < results[static_cast<size_t>(best)].step_s) best = static_cast<int64_t>(i);
    }
    return best;
}

void applyCandidate(const SweepCandidate& c, core::Plan& plan) {
    plan.sharding.strategy = c.strategy;
    plan.sharding.shard_size = 0;
    plan.sharding.wrap = c.wrap;
    plan.training.micro_batch = c.micro_batch;
    core::applyAc(plan.training, c.ac);
}

std::string candidateLabel(const SweepCandidate& c) {
    return std::string(core::strategyName(c.strategy)) + " " + core::wrapPolicyString(c.wrap) + " mb" +
           std::to_string(c.micro_batch) + " ac=" + core::acString(c.ac);
}

}  // namespace shardcast::sim
