#include "planstore/planstore.hpp"

#include <algorithm>
#include <optional>
#include <system_error>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/base/host_info.hpp"
#include "core/base/units.hpp"
#include "core/plan/sharding.hpp"
#include "core/results/step_io.hpp"

namespace shardcast::planstore {

namespace fs = std::filesystem;

core::Result<std::vector<std::string>> storedProfileNames(const db::Store& store) {
    auto entries = store.list(db::Kind::profile, std::nullopt);
    if (!entries) return entries.error();
    std::vector<std::string> names;
    for (const db::Entry& e : *entries) {
        if (!e.name.empty() && std::find(names.begin(), names.end(), e.name) == names.end()) names.push_back(e.name);
    }
    return names;
}

core::Result<ResolvedProfile> resolveProfile(const core::ClusterSpec& cluster, const std::string& arg,
                                             const fs::path& store_path) {
    std::error_code ec;
    if (arg.empty() || fs::exists(arg, ec)) {
        auto profile = sim::resolveProfile(cluster, arg);
        if (!profile) return profile.error();
        return ResolvedProfile{std::move(*profile), std::nullopt, arg.empty() ? "preset" : "file"};
    }
    if (!fs::exists(store_path, ec)) {
        return core::makeError(fmt::format("'{}' is neither a file nor a stored profile: no such file, and no store at "
                                           "{} yet (`calibrate --save NAME` stores a profile there)",
                                           arg, store_path.string()));
    }
    auto store = db::Store::open(store_path, false);
    if (!store) {
        return core::makeError(fmt::format("'{}' is neither a file nor a stored profile: no such file, and {}", arg,
                                           store.error().message));
    }
    auto object = (*store)->profileByName(arg);
    if (!object) {
        auto names = storedProfileNames(**store);
        const std::string listed = names && !names->empty() ? fmt::format("{}", fmt::join(*names, ", ")) : "none";
        return core::makeError(fmt::format("'{}' is neither a file nor a profile stored in {} (stored profiles: {})", arg,
                                           (*store)->path().string(), listed));
    }
    const std::string where = fmt::format("{}: {}", (*store)->path().string(), db::formatId(object->id));
    auto profile = sim::profileFromJson(object->body.at("profile"), where, sim::HardwareProfile::fromCluster(cluster));
    if (!profile) return profile.error();
    return ResolvedProfile{std::move(*profile), object->id, object->body.value("source", std::string("calibrated"))};
}

std::string planSummaryLine(const core::Plan& plan) {
    const auto& t = plan.training;
    return fmt::format("{}, {}x {}, {}, {}, mb {} x seq {}{}", plan.model ? plan.model->name : plan.model_ref,
                       plan.cluster.worldSize(), plan.cluster.gpu.name, core::strategyName(plan.sharding.strategy),
                       core::wrapPolicyString(plan.sharding.wrap), t.micro_batch, t.seq_len,
                       t.grad_accum > 1 ? fmt::format(" x accum {}", t.grad_accum) : std::string());
}

core::Result<SavedPrediction> savePrediction(db::Store& store, const core::Plan& plan, const sim::Evaluation& e,
                                             const ResolvedProfile& profile, const std::string& name) {
    if (e.period.byPeriod()) {
        return core::makeError(fmt::format(
            "this evaluation simulated {} of the step's {} micro-batches and took the rest from their period; a saved "
            "prediction keeps every micro-batch's timeline: evaluate the plan whole (EvaluationOptions::period_over 0)",
            e.period.simulated, e.period.micro_batches));
    }
    auto plan_json = core::selfContainedPlanJson(plan);
    if (!plan_json) return plan_json.error();
    // The plan first, with its one-line summary: the store finds it again by its hash.
    auto plan_id = store.savePlan(*plan_json, "", planSummaryLine(plan));
    if (!plan_id) return plan_id.error();
    std::optional<db::ObjectId> profile_id = profile.stored;
    if (!profile_id) {
        // The figures in effect, stored once per content: a prediction can always be re-made.
        db::ProfileInput input;
        input.name = fmt::format("{} {}", profile.profile.gpu.name, profile.source == "preset" ? "defaults" : "file");
        input.cluster = profile.profile.gpu.name;
        input.source = profile.source;
        input.profile = sim::profileToJson(profile.profile);
        input.summary_line = fmt::format("{}, {} bf16 peak", core::formatGiB(profile.profile.gpu.memory_bytes),
                                         core::formatFlopRate(profile.profile.peakFlops(core::DType::BF16)));
        auto saved = store.saveProfile(input);
        if (!saved) return saved.error();
        profile_id = *saved;
    }
    db::PredictionInput input;
    input.name = name;
    input.plan = std::move(*plan_json);
    input.profile = profile_id;
    input.headroom = e.fit.headroom;
    input.summary = core::stepSummaryToJson(e.summary);
    input.timeline = core::timelineToJson(e.timeline);
    input.memory = core::timedMemoryToJson(e.timed);
    input.summary_line = fmt::format("{}: {:.2f} ms/step, peak {} of {} ({})", planSummaryLine(plan), e.summary.step_s * 1e3,
                                     core::formatGiB(e.summary.peak_bytes), core::formatGiB(e.fit.capacity_bytes),
                                     e.fit.fits ? "fits" : "does not fit");
    auto saved = store.savePrediction(input);
    if (!saved) return saved.error();
    return SavedPrediction{*saved, *plan_id};
}

core::Result<std::vector<SavedPrediction>> evaluateAndSave(db::Store& store, const std::vector<core::Plan>& plans,
                                                           const ResolvedProfile& profile, double headroom,
                                                           const std::string& name, const std::string& tag) {
    sim::EvaluationOptions options;
    options.headroom = headroom;
    options.record_curve = true;
    options.issue_order_memory = false;
    sim::Evaluator evaluator;
    sim::Evaluation e;
    std::vector<SavedPrediction> out;
    for (const core::Plan& plan : plans) {
        core::Status done = evaluator.evaluate(plan, &profile.profile, options, e);
        core::Result<SavedPrediction> saved = core::makeError("not evaluated");
        if (done) saved = savePrediction(store, plan, e, profile, name);
        if (done && saved && !tag.empty()) done = store.addTag(saved->prediction, tag);
        if (!done || !saved) {
            std::vector<std::string> ids;
            for (const SavedPrediction& s : out) ids.push_back(db::formatId(s.prediction));
            return core::makeError(fmt::format("{} (saved before it: {})", (!done ? done.error() : saved.error()).message,
                                               ids.empty() ? "none" : fmt::format("{}", fmt::join(ids, ", "))));
        }
        out.push_back(*saved);
    }
    return out;
}

core::Result<db::ObjectId> saveCalibratedProfile(db::Store& store, const sim::HardwareProfile& profile,
                                                 const std::string& name) {
    db::ProfileInput input;
    input.name = name;
    input.cluster = core::hostName();
    input.source = "calibrated";
    input.profile = sim::profileToJson(profile);
    input.summary_line = fmt::format("calibrated on {}: {}", input.cluster, profile.gpu.name);
    return store.saveProfile(input);
}

core::Result<StoredPrediction> loadStoredPrediction(const db::Store& store, const db::ObjectId& id) {
    const std::string db_path = store.path().string();
    const std::string pred_name = db_path + ": " + db::formatId(id);
    auto pred = store.get(id);
    if (!pred) return pred.error();
    std::optional<db::ObjectId> plan_id, profile_id;
    for (const db::ObjectId& link : pred->links) {
        if (link.kind == db::Kind::plan) plan_id = link;
        if (link.kind == db::Kind::profile) profile_id = link;
    }
    if (!plan_id) return core::makeError(pred_name + ": the prediction has no plan");
    auto plan_obj = store.get(*plan_id);
    if (!plan_obj) return plan_obj.error();
    auto plan = core::planFromJson(plan_obj->body.at("plan"), db_path + ": " + db::formatId(*plan_id),
                                   std::filesystem::current_path());
    if (!plan) return plan.error();
    StoredPrediction out{*plan, sim::HardwareProfile::fromCluster(plan->cluster), {}, {}, {}};
    if (profile_id) {
        auto prof_obj = store.get(*profile_id);
        if (!prof_obj) return prof_obj.error();
        auto parsed = sim::profileFromJson(prof_obj->body.at("profile"), db_path + ": " + db::formatId(*profile_id),
                                           out.profile);
        if (!parsed) return parsed.error();
        out.profile = *parsed;
    }
    sim::EvaluationOptions options;
    options.issue_order_memory = false;
    options.per_unit = false;
    sim::Evaluator evaluator;
    if (auto s = evaluator.evaluate(out.plan, &out.profile, options, out.evaluation); !s) {
        return core::makeError(pred_name + ": " + s.error().message);
    }
    auto timeline = core::timelineFromJson(pred->body.at("timeline"), pred_name + ": timeline");
    if (!timeline) return timeline.error();
    auto memory = core::timedMemoryFromJson(pred->body.at("memory"), pred_name + ": memory");
    if (!memory) return memory.error();
    if (timeline->tasks.size() != out.evaluation.program.tasks.size()) {
        return core::makeError(fmt::format(
            "{}: its timeline has {} tasks but its plan lowers to {} in this shardcast (made by shardcast {}); "
            "re-make the prediction",
            pred_name, timeline->tasks.size(), out.evaluation.program.tasks.size(),
            pred->body.value("shardcast_version", "?")));
    }
    out.timeline = std::move(*timeline);
    out.memory = std::move(*memory);
    return out;
}

}  // namespace shardcast::planstore
