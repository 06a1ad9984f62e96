// Opening: files the store must refuse without touching them, and the migration of a version-1 store.
#include <filesystem>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "db/schema.hpp"
#include "db/sqlite.hpp"
#include "db/store.hpp"
#include "tests/db/temp_store.hpp"

namespace {

using namespace shardcast::db;
using shardcast::db::testing::readBytes;
using shardcast::db::testing::samplePlan;
using shardcast::db::testing::samplePrediction;
using shardcast::db::testing::sampleTimeline;
using shardcast::db::testing::contains;
using shardcast::db::testing::TempDir;
using shardcast::db::testing::writeBytes;
namespace fs = std::filesystem;

// A closed store with enough content for several pages (the last close checkpoints and removes the log).
void makeStore(const fs::path& path) {
    auto store = Store::open(path);
    ASSERT_TRUE(store.ok()) << store.error().message;
    for (int i = 0; i < 40; ++i) {
        PredictionInput in = samplePrediction(i);
        in.timeline = sampleTimeline(i, 500);
        ASSERT_TRUE((*store)->savePrediction(in).ok());
    }
}

void exec(const fs::path& path, const std::string& sql) {
    auto c = sqlite::Connection::open(path, true);
    ASSERT_TRUE(c.ok()) << c.error().message;
    auto st = (*c)->exec(sql);
    ASSERT_TRUE(st.ok()) << st.error().message;
}

// Store::open must fail naming the file and every one of `expected`, and leave the folder as it was.
void expectRefused(const TempDir& dir, const fs::path& path, const std::vector<std::string>& expected) {
    const std::string before = readBytes(path);
    ASSERT_FALSE(fs::exists(path.string() + "-wal"));
    auto store = Store::open(path);
    ASSERT_FALSE(store.ok()) << path << " was opened";
    EXPECT_TRUE(contains(store.error().message, path.string())) << store.error().message;
    for (const std::string& e : expected) EXPECT_TRUE(contains(store.error().message, e)) << store.error().message;
    EXPECT_EQ(readBytes(path), before) << "the refused file changed";
    size_t files = 0;
    for ([[maybe_unused]] const auto& entry : fs::directory_iterator(dir.path())) ++files;
    EXPECT_EQ(files, 1u) << "a -wal, -shm or -journal file was left beside " << path;
}

TEST(StoreOpenTest, RefusesATextFile) {
    TempDir dir;
    const fs::path path = dir / "notes.txt";
    writeBytes(path, "these are my notes, not a database\n");
    expectRefused(dir, path, {"not a SQLite database"});
}

TEST(StoreOpenTest, RefusesATruncatedStore) {
    TempDir dir;
    const fs::path real = dir / "real.db";
    makeStore(real);
    const std::string bytes = readBytes(real);
    ASSERT_GT(bytes.size(), 8192u);
    TempDir other;
    const fs::path cut = other / "cut.db";
    writeBytes(cut, bytes.substr(0, bytes.size() / 2));
    expectRefused(other, cut, {"truncated", std::to_string(bytes.size() / 2) + " bytes"});
    // A file shorter than the header itself.
    TempDir tiny;
    writeBytes(tiny / "tiny.db", bytes.substr(0, 50));
    expectRefused(tiny, tiny / "tiny.db", {"truncated"});
}

TEST(StoreOpenTest, RefusesANewerSchemaNamingBothVersions) {
    TempDir dir;
    const fs::path path = dir / "newer.db";
    makeStore(path);
    exec(path, "PRAGMA user_version = 99");
    const std::string ours = std::string("(").append(std::to_string(kSchemaVersion)).append(")");  // GCC 12 -Wrestrict
    expectRefused(dir, path, {"schema version 99", ours});
}

TEST(StoreOpenTest, RefusesAnotherApplicationsDatabase) {
    TempDir dir;
    const fs::path plain = dir / "other.db";
    exec(plain, "CREATE TABLE recipes (name TEXT); INSERT INTO recipes VALUES ('bread')");
    expectRefused(dir, plain, {"another application"});

    TempDir dir2;
    const fs::path tagged = dir2 / "tagged.db";
    exec(tagged, "PRAGMA application_id = 1234; CREATE TABLE t (x)");
    expectRefused(dir2, tagged, {"another application", "1234"});
}

TEST(StoreOpenTest, ADamagedBlobIsAnErrorNamingFileAndObject) {
    TempDir dir;
    const fs::path path = dir / "store.db";
    makeStore(path);
    exec(path, "UPDATE predictions SET body = x'789c0000' WHERE id = 3");
    exec(path, "UPDATE predictions SET body_bytes = -5 WHERE id = 4");
    auto store = Store::open(path);
    ASSERT_TRUE(store.ok()) << store.error().message;
    for (const char* id : {"pred-3", "pred-4"}) {
        auto got = (*store)->get(*parseId(id));
        ASSERT_FALSE(got.ok()) << id;
        EXPECT_TRUE(contains(got.error().message, path.string() + ": " + id)) << got.error().message;
        EXPECT_TRUE(contains(got.error().message, "damaged")) << got.error().message;
    }
    EXPECT_TRUE((*store)->get({Kind::prediction, 5}).ok());
}

TEST(StoreOpenTest, AnEmptySqliteFileBecomesAStore) {
    TempDir dir;
    writeBytes(dir / "empty.db", "");
    auto store = Store::open(dir / "empty.db");
    ASSERT_TRUE(store.ok()) << store.error().message;
    EXPECT_EQ((*store)->check()->schema_version, kSchemaVersion);
}

TEST(StoreOpenTest, MigratesAVersion1Store) {
    TempDir dir;
    const fs::path path = dir / "store.db";
    fs::copy_file(fs::path(SHARDCAST_SOURCE_DIR) / "tests/data/store-v1.db", path);
    {
        auto raw = sqlite::Connection::open(path, false);
        ASSERT_TRUE(raw.ok());
        EXPECT_EQ(*(*raw)->queryInt("PRAGMA user_version"), 1);
        EXPECT_EQ(*(*raw)->queryInt("SELECT count(*) FROM sqlite_schema WHERE name = 'comparisons'"), 0);
    }
    auto opened = Store::open(path);
    ASSERT_TRUE(opened.ok()) << opened.error().message;
    Store& store = **opened;
    auto report = store.check();
    EXPECT_EQ(report->schema_version, 2);
    EXPECT_EQ(report->integrity, "ok");
    EXPECT_EQ(report->plans, 1);
    EXPECT_EQ(report->predictions, 1);
    EXPECT_EQ(report->runs, 1);
    EXPECT_EQ(report->profiles, 1);

    const PredictionInput expected = samplePrediction(1);
    auto plan = store.get({Kind::plan, 1});
    ASSERT_TRUE(plan.ok()) << plan.error().message;
    EXPECT_EQ(plan->name, "v1 plan");
    EXPECT_EQ(plan->created_unix_ms, 1767225600000);
    EXPECT_EQ(plan->body.at("plan"), expected.plan);
    auto pred = store.get({Kind::prediction, 1});
    ASSERT_TRUE(pred.ok());
    EXPECT_EQ(pred->body.at("timeline"), expected.timeline);
    EXPECT_EQ(pred->body.at("memory"), expected.memory);
    EXPECT_EQ(pred->body.at("headroom"), 0.25);
    EXPECT_EQ(pred->links, (std::vector<ObjectId>{{Kind::plan, 1}, {Kind::profile, 1}}));
    auto run = store.get({Kind::run, 1});
    ASSERT_TRUE(run.ok());
    EXPECT_EQ(run->body.at("record").at("timeline"), sampleTimeline(1));
    EXPECT_EQ(store.profileByName("lab")->id, (ObjectId{Kind::profile, 1}));

    // Version 2's tables work on the migrated data, and the hash still dedupes.
    auto cmp = store.saveComparison({"after", {Kind::run, 1}, {Kind::prediction, 1}, {{"ok", true}}, ""});
    ASSERT_TRUE(cmp.ok()) << cmp.error().message;
    ASSERT_TRUE(store.addTag({Kind::plan, 1}, "old").ok());
    EXPECT_EQ(*store.savePlan(samplePlan(1), "", ""), (ObjectId{Kind::plan, 1}));
    auto removed = store.remove({Kind::plan, 1}, true);
    ASSERT_TRUE(removed.ok());
    EXPECT_EQ(*removed, (std::vector<ObjectId>{{Kind::plan, 1}, {Kind::prediction, 1}, *cmp}));
    EXPECT_EQ(store.list(std::nullopt, "old")->size(), 0u);
}

}  // namespace
