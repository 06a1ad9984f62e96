// Makes tests/data/store-v1.db, the fixture of StoreOpenTest.MigratesAVersion1Store: a store exactly
// as schema version 1 left it (migration 1 only, user_version 1) holding one plan, one profile,
// one prediction and one run, their documents from tests/db/temp_store.hpp with sequence number 1.
// Made once with
//   build/bin/make_store_v1 tests/data/store-v1.db
// and committed; rerun it only to recreate the same content. Written with the rollback journal
// (not WAL) so the fixture is one self-contained file.
#include <cstdio>
#include <filesystem>
#include <string>

#include "db/blob.hpp"
#include "db/schema.hpp"
#include "db/sha256.hpp"
#include "db/sqlite.hpp"
#include "tests/db/temp_store.hpp"

namespace {

using namespace shardcast;
using shardcast::db::sqlite::Connection;

// The fixed creation time of every fixture object: 2026-01-01T00:00:00Z.
constexpr int64_t kCreatedMs = 1767225600000;

core::Status insert(Connection& c, const std::string& sql, const nlohmann::json& doc,
                    const std::vector<std::string>& texts) {
    auto s = c.prepare(sql);
    if (!s) return s.error();
    const db::Blob blob = db::compressDocument(doc);
    int i = 1;
    for (const std::string& t : texts) {
        if (auto st = s->bind(i++, t); !st) return st;
    }
    if (auto st = s->bind(i++, kCreatedMs); !st) return st;
    if (auto st = s->bindBlob(i++, blob.bytes); !st) return st;
    if (auto st = s->bind(i++, blob.text_bytes); !st) return st;
    return s->run();
}

core::Status make(const std::filesystem::path& path) {
    auto c = Connection::open(path, true);
    if (!c) return c.error();
    Connection& db = **c;
    for (const std::string& sql :
         {std::string("BEGIN IMMEDIATE"), std::string(db::migrationTo(1)),
          "PRAGMA application_id = " + std::to_string(db::kApplicationId), std::string("PRAGMA user_version = 1")}) {
        if (auto st = db.exec(sql); !st) return st;
    }
    const db::PredictionInput pred = db::testing::samplePrediction(1);
    if (auto st = insert(db,
                         "INSERT INTO plans (name, summary, hash, created_ms, body, body_bytes) "
                         "VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                         pred.plan, {"v1 plan", "llama-3.1-8b, 8x H100-SXM", db::sha256Hex(pred.plan.dump())});
        !st)
        return st;
    if (auto st = insert(db,
                         "INSERT INTO profiles (name, summary, cluster, source, created_ms, body, body_bytes) "
                         "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                         {{"gemm_flops_per_s", 7.5e14}}, {"lab", "H100-SXM, calibrated", "cluster-a", "calibrated"});
        !st)
        return st;
    if (auto st = insert(db,
                         "INSERT INTO predictions (name, summary, shardcast_version, plan, profile, headroom, "
                         "created_ms, body, body_bytes) VALUES (?1, ?2, ?3, 1, 1, 0.25, ?4, ?5, ?6)",
                         {{"summary", pred.summary}, {"timeline", pred.timeline}, {"memory", pred.memory}},
                         {"v1 prediction", pred.summary_line, "0.1.0"});
        !st)
        return st;
    if (auto st = insert(db,
                         "INSERT INTO runs (name, summary, backend, plan, created_ms, body, body_bytes) "
                         "VALUES (?1, ?2, ?3, 1, ?4, ?5, ?6)",
                         {{"backend", "cpu"}, {"timeline", db::testing::sampleTimeline(1)}},
                         {"v1 run", "2.50 s measured", "cpu"});
        !st)
        return st;
    return db.exec("COMMIT");
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: make_store_v1 OUT.db (OUT.db must not exist)\n");
        return 2;
    }
    if (std::filesystem::exists(argv[1])) {
        std::fprintf(stderr, "make_store_v1: %s exists; remove it first\n", argv[1]);
        return 2;
    }
    if (auto st = make(argv[1]); !st) {
        std::fprintf(stderr, "make_store_v1: %s\n", st.error().message.c_str());
        return 1;
    }
    return 0;
}
