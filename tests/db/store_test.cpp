#include "db/store.hpp"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/base/version.hpp"
#include "core/results/step_io.hpp"
#include "tests/db/temp_store.hpp"

namespace {

using namespace shardcast::db;
using shardcast::db::testing::samplePlan;
using shardcast::db::testing::samplePrediction;
using shardcast::db::testing::sampleTimeline;
using shardcast::db::testing::contains;
using shardcast::db::testing::TempDir;
using nlohmann::json;

std::unique_ptr<Store> openStore(const TempDir& dir, const std::string& name = "store.db") {
    auto store = Store::open(dir / name);
    EXPECT_TRUE(store.ok()) << (store.ok() ? "" : store.error().message);
    return std::move(store).value();
}

ProfileInput sampleProfile(const std::string& name, int64_t seq) {
    return ProfileInput{name, "cluster-a", "calibrated", {{"gemm_flops_per_s", 7.5e14 + static_cast<double>(seq)}},
                        "H100-SXM, calibrated " + std::to_string(seq)};
}

RunInput sampleRun(int64_t seq, bool with_plan) {
    RunInput in;
    in.name = "run " + std::to_string(seq);
    if (with_plan) in.plan = samplePlan(seq);
    in.record = {{"format", "shardcast-run"}, {"backend", "cpu"}, {"environment", {{"host", "box"}}},
                 {"timeline", sampleTimeline(seq)}, {"step_ns", {1, 2, 3}}};
    in.summary_line = "2.50 s measured";
    return in;
}

TEST(StoreTest, IdsFormatAndParse) {
    EXPECT_EQ(formatId({Kind::plan, 12}), "plan-12");
    EXPECT_EQ(formatId({Kind::prediction, 3}), "pred-3");
    EXPECT_EQ(formatId({Kind::run, 5}), "run-5");
    EXPECT_EQ(formatId({Kind::profile, 2}), "prof-2");
    EXPECT_EQ(formatId({Kind::comparison, 1}), "cmp-1");
    for (Kind k : {Kind::plan, Kind::prediction, Kind::run, Kind::profile, Kind::comparison}) {
        auto back = parseId(formatId({k, 42}));
        ASSERT_TRUE(back.ok());
        EXPECT_EQ(*back, (ObjectId{k, 42}));
        auto plural = parseKindPlural(kindPluralName(k));
        ASSERT_TRUE(plural.ok());
        EXPECT_EQ(*plural, k);
    }
    for (const char* bad : {"", "plan", "plan-", "plan-0", "plan-01", "plan-x", "plan-1x", "Plan-1", "prediction-1",
                            "plan--1", "plan-99999999999999999999"}) {
        auto id = parseId(bad);
        ASSERT_FALSE(id.ok()) << bad;
        const std::string quoted = std::string(1, '\'').append(bad).append(1, '\'');  // GCC 12 -Wrestrict
        EXPECT_TRUE(contains(id.error().message, quoted)) << id.error().message;
        EXPECT_TRUE(contains(id.error().message, "plan-N, pred-N, run-N, prof-N or cmp-N")) << id.error().message;
    }
    auto kind = parseKindPlural("plan");
    ASSERT_FALSE(kind.ok());
    EXPECT_TRUE(contains(kind.error().message, "plans, predictions, runs, profiles, comparisons"));
}

TEST(StoreTest, DefaultPathFollowsTheEnvironment) {
    const char* keep_db = std::getenv("SHARDCAST_DB");
    const char* keep_xdg = std::getenv("XDG_DATA_HOME");
    const char* keep_home = std::getenv("HOME");
    const std::string saved_db = keep_db ? keep_db : "", saved_xdg = keep_xdg ? keep_xdg : "",
                      saved_home = keep_home ? keep_home : "";
    setenv("HOME", "/home/u", 1);
    unsetenv("XDG_DATA_HOME");
    unsetenv("SHARDCAST_DB");
    EXPECT_EQ(*defaultDbPath(), "/home/u/.local/share/shardcast/shardcast.db");
    setenv("XDG_DATA_HOME", "relative/dir", 1);  // not absolute: ignored, as the XDG spec says
    EXPECT_EQ(*defaultDbPath(), "/home/u/.local/share/shardcast/shardcast.db");
    setenv("XDG_DATA_HOME", "/data", 1);
    EXPECT_EQ(*defaultDbPath(), "/data/shardcast/shardcast.db");
    setenv("SHARDCAST_DB", "/x/y.db", 1);
    EXPECT_EQ(*defaultDbPath(), "/x/y.db");
    setenv("SHARDCAST_DB", "", 1);
    unsetenv("XDG_DATA_HOME");
    unsetenv("HOME");
    EXPECT_FALSE(defaultDbPath().ok());
    auto restore = [](const char* name, const char* was, const std::string& value) {
        if (was) setenv(name, value.c_str(), 1); else unsetenv(name);
    };
    restore("SHARDCAST_DB", keep_db, saved_db);
    restore("XDG_DATA_HOME", keep_xdg, saved_xdg);
    restore("HOME", keep_home, saved_home);
}

TEST(StoreTest, CreatesItsFoldersAndReportsTheSchema) {
    TempDir dir;
    auto store = Store::open(dir / "a/b/store.db");
    ASSERT_TRUE(store.ok()) << store.error().message;
    auto report = (*store)->check();
    ASSERT_TRUE(report.ok());
    EXPECT_EQ(report->schema_version, kSchemaVersion);
    EXPECT_EQ(report->integrity, "ok");
    EXPECT_EQ(report->plans, 0);
    EXPECT_GT(report->file_bytes, 0);
    auto missing = Store::open(dir / "none.db", false);
    ASSERT_FALSE(missing.ok());
    EXPECT_TRUE(contains(missing.error().message, (dir / "none.db").string()));
    EXPECT_FALSE(std::filesystem::exists(dir / "none.db"));
}

TEST(StoreTest, PlanRoundTripAndDedupeByHash) {
    TempDir dir;
    auto store = openStore(dir);
    const json plan = samplePlan(1);
    auto first = store->savePlan(plan, "", "llama-3.1-8b, 8x H100-SXM, FULL_SHARD");
    ASSERT_TRUE(first.ok()) << first.error().message;
    EXPECT_EQ(*first, (ObjectId{Kind::plan, 1}));
    // The same content again: the first id, and the name fills the empty one.
    auto again = store->savePlan(plan, "baseline", "other summary");
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(*again, *first);
    auto third = store->savePlan(plan, "renamed", "");
    EXPECT_EQ(*third, *first);
    auto other = store->savePlan(samplePlan(2), "other", "");
    EXPECT_EQ(*other, (ObjectId{Kind::plan, 2}));

    auto got = store->get(*first);
    ASSERT_TRUE(got.ok()) << got.error().message;
    EXPECT_EQ(got->body.at("plan"), plan);
    EXPECT_EQ(got->body.at("plan").dump(), plan.dump());
    EXPECT_EQ(got->name, "baseline");
    // SHA-256 of the compact dump (tests/db/sha256_test.cpp checks the hash function itself).
    EXPECT_EQ(got->body.at("hash").get<std::string>().size(), 64u);
    EXPECT_NE(got->body.at("hash"), store->get(*other)->body.at("hash"));
    auto list = store->list(Kind::plan, std::nullopt);
    ASSERT_EQ(list->size(), 2u);
    EXPECT_EQ(list->back().summary, "llama-3.1-8b, 8x H100-SXM, FULL_SHARD");
    EXPECT_EQ(store->check()->plans, 2);
}

TEST(StoreTest, EveryKindRoundTripsWithLinks) {
    TempDir dir;
    auto store = openStore(dir);
    auto profile = store->saveProfile(sampleProfile("lab", 1));
    ASSERT_TRUE(profile.ok()) << profile.error().message;
    PredictionInput pred_in = samplePrediction(7);
    pred_in.profile = *profile;
    auto pred = store->savePrediction(pred_in);
    ASSERT_TRUE(pred.ok()) << pred.error().message;
    auto run = store->saveRun(sampleRun(7, true));
    ASSERT_TRUE(run.ok()) << run.error().message;
    auto bare_run = store->saveRun(sampleRun(8, false));
    ASSERT_TRUE(bare_run.ok());
    auto cmp = store->saveComparison({"cmp", *run, *pred, {{"step_error", -0.031}}, "-3.1 %"});
    ASSERT_TRUE(cmp.ok()) << cmp.error().message;

    // The prediction and the run share one plan: same content, one row.
    const ObjectId plan{Kind::plan, 1};
    EXPECT_EQ(store->check()->plans, 1);

    auto p = store->get(*pred);
    ASSERT_TRUE(p.ok()) << p.error().message;
    EXPECT_EQ(p->name, "pred 7");
    EXPECT_EQ(p->body.at("plan"), "plan-1");
    EXPECT_EQ(p->body.at("profile"), formatId(*profile));
    EXPECT_EQ(p->body.at("shardcast_version"), std::string(shardcast::core::kShardcastVersion));
    EXPECT_EQ(p->body.at("headroom").get<double>(), pred_in.headroom);
    EXPECT_EQ(p->body.at("summary"), pred_in.summary);
    EXPECT_EQ(p->body.at("timeline"), pred_in.timeline);
    EXPECT_EQ(p->body.at("timeline").dump(), pred_in.timeline.dump());
    EXPECT_EQ(p->body.at("memory"), pred_in.memory);
    EXPECT_EQ(p->links, (std::vector<ObjectId>{plan, *profile}));
    EXPECT_EQ(store->get(plan)->body.at("plan"), pred_in.plan);

    const RunInput run_in = sampleRun(7, true);
    auto r = store->get(*run);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->body.at("record"), run_in.record);
    EXPECT_EQ(r->body.at("backend"), "cpu");
    EXPECT_EQ(r->body.at("environment"), run_in.record.at("environment"));
    EXPECT_EQ(r->body.at("plan"), "plan-1");
    EXPECT_EQ(r->links, (std::vector<ObjectId>{plan}));
    auto br = store->get(*bare_run);
    EXPECT_TRUE(br->body.at("plan").is_null());
    EXPECT_TRUE(br->links.empty());

    auto pr = store->get(*profile);
    EXPECT_EQ(pr->body.at("cluster"), "cluster-a");
    EXPECT_EQ(pr->body.at("source"), "calibrated");
    EXPECT_EQ(pr->body.at("profile"), sampleProfile("lab", 1).profile);

    auto c = store->get(*cmp);
    EXPECT_EQ(c->body.at("run"), formatId(*run));
    EXPECT_EQ(c->body.at("prediction"), formatId(*pred));
    EXPECT_EQ(c->body.at("report"), (json{{"step_error", -0.031}}));
    EXPECT_EQ(c->links, (std::vector<ObjectId>{*run, *pred}));

    auto missing = store->get({Kind::run, 99});
    ASSERT_FALSE(missing.ok());
    EXPECT_TRUE(contains(missing.error().message, "run-99"));
    EXPECT_TRUE(contains(missing.error().message, (dir / "store.db").string()));
    auto bad_cmp = store->saveComparison({"", *run, {Kind::prediction, 42}, json::object(), ""});
    ASSERT_FALSE(bad_cmp.ok());
    EXPECT_TRUE(contains(bad_cmp.error().message, "pred-42"));
    PredictionInput bad_profile = samplePrediction(9);
    bad_profile.profile = ObjectId{Kind::profile, 77};
    auto bp = store->savePrediction(bad_profile);
    ASSERT_FALSE(bp.ok());
    EXPECT_TRUE(contains(bp.error().message, "prof-77"));
    EXPECT_EQ(store->check()->plans, 1);  // the failed save left no plan behind: one transaction
}

TEST(StoreTest, LargeTimelineReadsBackIdentical) {
    TempDir dir;
    auto store = openStore(dir);
    PredictionInput in = samplePrediction(3);
    in.timeline = sampleTimeline(3, 200000);
    auto id = store->savePrediction(in);
    ASSERT_TRUE(id.ok()) << id.error().message;
    auto back = store->get(*id);
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(back->body.at("timeline").dump(), in.timeline.dump());
    // Compressed: far smaller than the JSON text (about 5 MB here).
    EXPECT_LT(store->check()->file_bytes, static_cast<int64_t>(in.timeline.dump().size()) / 2);
}

// The core types' own documents survive the store: read back, they parse to equal values.
TEST(StoreTest, CoreTimelineAndMemoryReadBackEqual) {
    namespace core = shardcast::core;
    core::Timeline timeline;
    core::TimedMemory memory;
    for (int64_t i = 0; i < 5000; ++i) {
        const auto stream = static_cast<core::Stream>(i % 3);
        timeline.tasks.push_back(core::TaskTime{i * 1000 + 3, i * 1000 + 997 + i % 7, stream});
        timeline.stream_busy_ns[static_cast<size_t>(stream)] += 994 + i % 7;
        core::MemoryPoint p;
        p.time_ns = i * 1000;
        p.task = static_cast<int32_t>(i);
        p.bytes.fill((int64_t{1} << 34) + i * 4099);
        memory.curve.push_back(p);
    }
    timeline.step_ns = 5'000'000;
    memory.peak_bytes = (int64_t{1} << 36) + 12345;
    memory.peak_time_ns = 4'999'000;
    memory.peak_task = 4999;
    memory.at_peak = memory.curve.back().bytes;
    memory.max_per_category = memory.curve.back().bytes;

    TempDir dir;
    auto store = openStore(dir);
    PredictionInput in = samplePrediction(1);
    in.timeline = core::timelineToJson(timeline);
    in.memory = core::timedMemoryToJson(memory);
    auto id = store->savePrediction(in);
    ASSERT_TRUE(id.ok()) << id.error().message;
    auto got = store->get(*id);
    ASSERT_TRUE(got.ok());
    auto t = core::timelineFromJson(got->body.at("timeline"), "stored timeline");
    ASSERT_TRUE(t.ok()) << t.error().message;
    EXPECT_EQ(*t, timeline);
    auto m = core::timedMemoryFromJson(got->body.at("memory"), "stored memory");
    ASSERT_TRUE(m.ok()) << m.error().message;
    EXPECT_EQ(*m, memory);
}

TEST(StoreTest, TagsNotesAndListFilters) {
    TempDir dir;
    auto store = openStore(dir);
    auto plan_a = *store->savePlan(samplePlan(1), "a", "A");
    auto plan_b = *store->savePlan(samplePlan(2), "b", "B");
    auto plan_c = *store->savePlan(samplePlan(3), "c", "C");
    auto prof = *store->saveProfile(sampleProfile("lab", 1));
    const std::string tricky = "it's; DROP TABLE tags; --";
    ASSERT_TRUE(store->addTag(plan_a, "keep").ok());
    ASSERT_TRUE(store->addTag(plan_a, tricky).ok());
    ASSERT_TRUE(store->addTag(plan_a, "keep").ok());  // twice: once
    ASSERT_TRUE(store->addTag(plan_c, "keep").ok());
    ASSERT_TRUE(store->addTag(prof, "keep").ok());
    ASSERT_TRUE(store->addNote(plan_a, "first").ok());
    ASSERT_TRUE(store->addNote(plan_a, tricky).ok());
    auto bad = store->addTag({Kind::plan, 9}, "x");
    ASSERT_FALSE(bad.ok());
    EXPECT_TRUE(contains(bad.error().message, "plan-9"));
    EXPECT_FALSE(store->addTag(plan_a, "").ok());
    EXPECT_FALSE(store->addNote({Kind::comparison, 1}, "x").ok());

    auto a = store->get(plan_a);
    EXPECT_EQ(a->tags, (std::vector<std::string>{tricky, "keep"}));  // sorted
    ASSERT_EQ(a->notes.size(), 2u);
    EXPECT_EQ(a->notes[0].text, "first");
    EXPECT_EQ(a->notes[1].text, tricky);
    EXPECT_GT(a->notes[0].created_unix_ms, 0);

    auto plans = store->list(Kind::plan, std::nullopt);
    ASSERT_TRUE(plans.ok());
    ASSERT_EQ(plans->size(), 3u);
    EXPECT_EQ((*plans)[0].id, plan_c);  // newest first
    EXPECT_EQ((*plans)[1].id, plan_b);
    EXPECT_EQ((*plans)[2].id, plan_a);
    EXPECT_EQ((*plans)[2].tags, a->tags);
    EXPECT_EQ((*plans)[2].name, "a");
    EXPECT_EQ((*plans)[2].summary, "A");
    auto kept = store->list(std::nullopt, "keep");
    ASSERT_EQ(kept->size(), 3u);
    std::vector<std::string> kept_ids;
    for (size_t i = 0; i < kept->size(); ++i) {
        kept_ids.push_back(formatId((*kept)[i].id));
        if (i > 0) {
            EXPECT_GE((*kept)[i - 1].created_unix_ms, (*kept)[i].created_unix_ms);  // newest first
        }
    }
    std::sort(kept_ids.begin(), kept_ids.end());
    EXPECT_EQ(kept_ids, (std::vector<std::string>{"plan-1", "plan-3", "prof-1"}));
    auto kept_plans = store->list(Kind::plan, "keep");
    ASSERT_EQ(kept_plans->size(), 2u);
    EXPECT_EQ((*kept_plans)[0].id, plan_c);
    EXPECT_EQ((*kept_plans)[1].id, plan_a);
    EXPECT_EQ(store->list(Kind::run, "keep")->size(), 0u);
    EXPECT_EQ(store->list(std::nullopt, tricky)->size(), 1u);
    EXPECT_EQ(store->list(std::nullopt, std::nullopt)->size(), 4u);
}

TEST(StoreTest, ProfileByNameIsTheNewest) {
    TempDir dir;
    auto store = openStore(dir);
    auto v1 = *store->saveProfile(sampleProfile("lab", 1));
    auto other = *store->saveProfile(sampleProfile("other", 5));
    auto v2 = *store->saveProfile(sampleProfile("lab", 2));
    (void)v1;
    (void)other;
    auto got = store->profileByName("lab");
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(got->id, v2);
    EXPECT_EQ(got->body.at("profile"), sampleProfile("lab", 2).profile);
    auto none = store->profileByName("nope");
    ASSERT_FALSE(none.ok());
    EXPECT_TRUE(contains(none.error().message, "'nope'"));
    EXPECT_FALSE(store->saveProfile(sampleProfile("", 1)).ok());
}

TEST(StoreTest, TheSameProfileAgainIsTheNewestNotACopy) {
    TempDir dir;
    auto store = openStore(dir);
    auto v1 = *store->saveProfile(sampleProfile("lab", 1));
    EXPECT_EQ(*store->saveProfile(sampleProfile("lab", 1)), v1);  // same name, same figures
    auto v2 = *store->saveProfile(sampleProfile("lab", 2));
    EXPECT_NE(v2, v1);
    // Back to the first figures: a new version, since the newest differs.
    auto v3 = *store->saveProfile(sampleProfile("lab", 1));
    EXPECT_NE(v3, v1);
    EXPECT_NE(v3, v2);
    ProfileInput other_source = sampleProfile("lab", 1);
    other_source.source = "file";
    EXPECT_NE(*store->saveProfile(other_source), v3);
    auto listed = store->list(Kind::profile, std::nullopt);
    ASSERT_TRUE(listed.ok());
    EXPECT_EQ(listed->size(), 4u);
}

TEST(StoreTest, RemoveRefusesThenCascadesAsDocumented) {
    TempDir dir;
    auto store = openStore(dir);
    auto prof = *store->saveProfile(sampleProfile("lab", 1));
    PredictionInput in = samplePrediction(1);
    in.profile = prof;
    auto pred = *store->savePrediction(in);
    auto pred2 = *store->savePrediction(samplePrediction(1));  // same plan, no profile
    auto run = *store->saveRun(sampleRun(1, true));
    auto cmp = *store->saveComparison({"", run, pred, json::object(), ""});
    const ObjectId plan{Kind::plan, 1};
    ASSERT_TRUE(store->addTag(pred, "t").ok());
    ASSERT_TRUE(store->addNote(cmp, "n").ok());

    auto refs = store->referencedBy(plan);
    ASSERT_TRUE(refs.ok());
    EXPECT_EQ(*refs, (std::vector<ObjectId>{pred, pred2, run}));
    EXPECT_EQ(*store->referencedBy(pred), (std::vector<ObjectId>{cmp}));
    EXPECT_EQ(*store->referencedBy(prof), (std::vector<ObjectId>{pred}));
    EXPECT_TRUE(store->referencedBy(cmp)->empty());

    auto refused = store->remove(plan, false);
    ASSERT_FALSE(refused.ok());
    EXPECT_TRUE(contains(refused.error().message, "plan-1"));
    EXPECT_TRUE(contains(refused.error().message, "pred-1, pred-2, run-1"));
    EXPECT_TRUE(contains(refused.error().message, "--force"));
    EXPECT_TRUE(store->get(plan).ok());

    // A profile: its prediction only loses the link.
    auto removed_prof = store->remove(prof, true);
    ASSERT_TRUE(removed_prof.ok()) << removed_prof.error().message;
    EXPECT_EQ(*removed_prof, (std::vector<ObjectId>{prof}));
    EXPECT_TRUE(store->get(pred)->body.at("profile").is_null());

    // The plan: its predictions and, through them, the comparison go; the run stays, unlinked.
    auto removed = store->remove(plan, true);
    ASSERT_TRUE(removed.ok()) << removed.error().message;
    EXPECT_EQ(*removed, (std::vector<ObjectId>{plan, pred, pred2, cmp}));
    for (const ObjectId& id : *removed) EXPECT_FALSE(store->get(id).ok()) << formatId(id);
    auto r = store->get(run);
    ASSERT_TRUE(r.ok());
    EXPECT_TRUE(r->body.at("plan").is_null());
    auto rest = store->list(std::nullopt, std::nullopt);
    ASSERT_EQ(rest->size(), 1u);
    EXPECT_EQ((*rest)[0].id, run);
    EXPECT_EQ(store->list(std::nullopt, "t")->size(), 0u);  // tags went with their object
    EXPECT_TRUE(store->remove(run, false).ok());
    EXPECT_FALSE(store->remove(run, false).ok());  // gone: names the id
    // Ids are never reused.
    EXPECT_EQ(*store->savePlan(samplePlan(1), "", ""), (ObjectId{Kind::plan, 2}));
    EXPECT_EQ(store->check()->integrity, "ok");
}

TEST(StoreTest, ExportImportRecreatesObjectsAndLinks) {
    TempDir dir;
    auto from = openStore(dir, "from.db");
    auto prof = *from->saveProfile(sampleProfile("lab", 1));
    PredictionInput in = samplePrediction(4);
    in.profile = prof;
    auto pred = *from->savePrediction(in);
    auto run = *from->saveRun(sampleRun(4, true));
    auto cmp = *from->saveComparison({"c", run, pred, {{"x", 1}}, "cmp summary"});
    ASSERT_TRUE(from->addTag(cmp, "important").ok());
    ASSERT_TRUE(from->addNote(cmp, "looked at it").ok());
    auto doc = from->exportObject(cmp);
    ASSERT_TRUE(doc.ok()) << doc.error().message;
    EXPECT_EQ(doc->at("format"), "shardcast-db-object");
    EXPECT_EQ(doc->at("kind"), "comparison");
    EXPECT_EQ(doc->at("linked").at(formatId(run)).at("kind"), "run");

    auto to = openStore(dir, "to.db");
    (void)*to->savePlan(samplePlan(100), "", "");  // so ids differ between the stores
    (void)*to->saveRun(sampleRun(100, false));
    auto imported = to->importObject(json::parse(doc->dump()), "cmp.json");
    ASSERT_TRUE(imported.ok()) << imported.error().message;
    const auto before = from->get(cmp), after = to->get(*imported);
    ASSERT_TRUE(after.ok());
    EXPECT_EQ(after->body.at("report"), before->body.at("report"));
    EXPECT_EQ(after->tags, before->tags);
    ASSERT_EQ(after->notes.size(), 1u);
    EXPECT_EQ(after->notes[0].text, "looked at it");
    EXPECT_EQ(after->name, "c");
    EXPECT_EQ(after->created_unix_ms, before->created_unix_ms);
    auto new_run = to->get(after->links.at(0));
    auto new_pred = to->get(after->links.at(1));
    ASSERT_TRUE(new_run.ok() && new_pred.ok());
    EXPECT_EQ(new_run->id, (ObjectId{Kind::run, 2}));
    EXPECT_EQ(new_run->body.at("record"), from->get(run)->body.at("record"));
    EXPECT_EQ(new_pred->body.at("timeline"), in.timeline);
    EXPECT_EQ(new_pred->body.at("headroom"), in.headroom);
    // Run and prediction share one plan in both stores.
    EXPECT_EQ(new_run->links, (std::vector<ObjectId>{{Kind::plan, 2}}));
    EXPECT_EQ(new_pred->links.at(0), (ObjectId{Kind::plan, 2}));
    auto new_prof = to->get(new_pred->links.at(1));
    EXPECT_EQ(new_prof->body, from->get(prof)->body);
    EXPECT_EQ(to->check()->plans, 2);
    auto summary = to->list(Kind::comparison, std::nullopt);
    EXPECT_EQ(summary->at(0).summary, "cmp summary");

    json broken = *doc;
    broken["body"]["run"] = "run-77";
    auto refused = to->importObject(broken, "broken.json");
    ASSERT_FALSE(refused.ok());
    EXPECT_TRUE(contains(refused.error().message, "broken.json"));
    EXPECT_TRUE(contains(refused.error().message, "run-77"));
    EXPECT_EQ(to->check()->comparisons, 1);  // nothing half-imported
    json newer = *doc;
    newer["version"] = 9;
    EXPECT_FALSE(to->importObject(newer, "newer.json").ok());
}

}  // namespace
