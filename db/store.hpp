#pragma once
// The store (issue 9; DESIGN.md section 7): one SQLite file of plans, predictions, measured runs,
// hardware profiles and comparisons, with tags and notes on any of them. db/ is the only code that
// speaks SQL; everything here takes and returns JSON documents and the core types' round-trips.
//
// Ids shown to users name the kind: "plan-12", "pred-3", "run-5", "prof-2", "cmp-1" (the number is
// the row id within its kind and is never reused).
//
// Safety: WAL, foreign keys on, a busy timeout, every write one transaction (BEGIN IMMEDIATE),
// prepared statements only. Opening never writes to a file it refuses: a file that is not a
// SQLite database, a truncated one, another application's database or one of a newer schema
// version is an error naming the file (and both versions) and the file is left byte-identical.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/base/result.hpp"

namespace shardcast::db {

inline constexpr int kSchemaVersion = 2;  // 1: plans, predictions, runs, profiles; 2: comparisons, tags, notes

enum class Kind { plan, prediction, run, profile, comparison };

struct ObjectId {
    Kind kind = Kind::plan;
    int64_t number = 0;
    bool operator==(const ObjectId&) const = default;
};

// "plan-12" etc.; parseId accepts exactly those forms and names them in its error.
std::string formatId(const ObjectId& id);
core::Result<ObjectId> parseId(std::string_view text);
// "plans", "predictions", "runs", "profiles", "comparisons" (the names `db list --kind` takes).
std::string_view kindPluralName(Kind kind);
core::Result<Kind> parseKindPlural(std::string_view text);

// SHARDCAST_DB if set and not empty; else $XDG_DATA_HOME/shardcast/shardcast.db when XDG_DATA_HOME
// is set to an absolute path; else $HOME/.local/share/shardcast/shardcast.db. Error without HOME.
core::Result<std::filesystem::path> defaultDbPath();

// One line per stored object, for `db list`: no blob is read to make it.
struct Entry {
    ObjectId id;
    std::string name;                  // may be empty
    int64_t created_unix_ms = 0;
    std::string summary;               // one line, e.g. "llama-3.1-8b, 8x H100-SXM, FULL_SHARD" or "2.41 s, 61.2 GiB"
    std::vector<std::string> tags;     // sorted
    std::vector<ObjectId> links;       // what it refers to (a prediction: its plan and profile)
};

struct Note {
    int64_t created_unix_ms = 0;
    std::string text;
};

// A stored object in full: its kind's document plus the store's fields.
struct Object {
    ObjectId id;
    std::string name;
    int64_t created_unix_ms = 0;
    std::vector<std::string> tags;
    std::vector<Note> notes;
    std::vector<ObjectId> links;
    // plan:       {"plan": self-contained plan JSON, "hash": "sha256-hex"}
    // prediction: {"plan": "plan-N", "profile": "prof-N"|null, "shardcast_version": "0.1.0",
    //              "headroom": H, "summary": stepSummaryToJson, "timeline": timelineToJson,
    //              "memory": timedMemoryToJson (with its curve)}
    // run:        {"plan": "plan-N"|null, "backend": "cpu", "environment": {...}, "record": runRecordToJson}
    // profile:    {"cluster": "name", "source": "preset"|"calibrated"|"file", "profile": profileToJson}
    // comparison: {"run": "run-N", "prediction": "pred-N", "report": comparisonToJson}
    nlohmann::json body;
};

struct PredictionInput {
    std::string name;
    nlohmann::json plan;                     // self-contained plan JSON (core::selfContainedPlanJson)
    std::optional<ObjectId> profile;         // a stored profile the prediction used
    double headroom = 0;
    nlohmann::json summary, timeline, memory;
    std::string summary_line;                // Entry::summary
};

struct RunInput {
    std::string name;
    std::optional<nlohmann::json> plan;      // self-contained plan JSON, saved (or found) and linked
    nlohmann::json record;                   // runRecordToJson
    std::string summary_line;
};

struct ProfileInput {
    std::string name;                        // saving an existing name adds a new version that
    std::string cluster;                     // `profileByName` then returns (the newest), unless the newest
                                             // has the same cluster, source and profile: then its id
    std::string source;                      // "preset" | "calibrated" | "file"
    nlohmann::json profile;                  // profileToJson
    std::string summary_line;
};

struct ComparisonInput {
    std::string name;
    ObjectId run, prediction;
    nlohmann::json report;                   // comparisonToJson
    std::string summary_line;
};

struct CheckReport {
    int schema_version = 0;
    std::string integrity;                   // "ok" or SQLite's first messages
    int64_t plans = 0, predictions = 0, runs = 0, profiles = 0, comparisons = 0;
    int64_t file_bytes = 0;
};

// One connection per Store: use a Store from one thread at a time (open one per thread); any
// number of processes may share the file.
class Store {
public:
    // Opens (and with `create`, creates with its folders) the store at `path` and migrates an older
    // schema forward in one transaction. Errors name the file: not a database, truncated, not a
    // shardcast store, newer schema ("FILE: schema version 7 is newer than this shardcast reads (2);
    // ..."), locked for longer than the busy timeout, read-only file or unwritable folder. An empty
    // file becomes a new store (as SQLite treats it).
    static core::Result<std::unique_ptr<Store>> open(const std::filesystem::path& path, bool create = true);
    ~Store();
    Store(const Store&) = delete;
    Store& operator=(const Store&) = delete;

    const std::filesystem::path& path() const;

    // Saving the same plan JSON twice (same content hash) returns the first one's id (a name given
    // the second time is added only if the first had none).
    core::Result<ObjectId> savePlan(const nlohmann::json& self_contained_plan, std::string_view name,
                                    std::string_view summary_line);
    core::Result<ObjectId> savePrediction(const PredictionInput& input);  // saves / finds its plan too
    core::Result<ObjectId> saveRun(const RunInput& input);
    core::Result<ObjectId> saveProfile(const ProfileInput& input);
    core::Result<ObjectId> saveComparison(const ComparisonInput& input);

    core::Status addTag(const ObjectId& id, std::string_view tag);
    core::Status addNote(const ObjectId& id, std::string_view text);

    // Newest first; `kind` and `tag` filter.
    core::Result<std::vector<Entry>> list(std::optional<Kind> kind, std::optional<std::string> tag) const;
    core::Result<Object> get(const ObjectId& id) const;   // error names the id when it does not exist
    core::Result<Object> profileByName(std::string_view name) const;  // newest profile of that name

    // Objects that refer to `id` (predictions of a plan, comparisons of a run, ...).
    core::Result<std::vector<ObjectId>> referencedBy(const ObjectId& id) const;
    // Without `force`, refuses when referencedBy is not empty (the error lists them). With it,
    // removes `id` and, recursively, what depends on it; returns every id removed, `id` first. What
    // depends: a plan's predictions, a run's or a prediction's comparisons. A run of a removed plan
    // and a prediction of a removed profile stay, their link set to null (the schema's foreign keys:
    // prediction.plan CASCADE, prediction.profile SET NULL, run.plan SET NULL, comparison.* CASCADE).
    // Tags and notes go with their object.
    core::Result<std::vector<ObjectId>> remove(const ObjectId& id, bool force);

    // {"format": "shardcast-db-object", "version": 1, "kind": "plan"|"prediction"|"run"|"profile"|
    // "comparison", "id", "name", "created_unix_ms", "summary", "tags", "notes", "body" (as get),
    // "linked": {"plan-3": <the same form>, ...}}: the objects it links to, embedded, recursively.
    // importObject of it into any store recreates it (new ids, same name, time, tags and notes) and
    // its links, in one transaction; plans already there (same hash) are reused.
    core::Result<nlohmann::json> exportObject(const ObjectId& id) const;
    core::Result<ObjectId> importObject(const nlohmann::json& document, const std::string& where);

    core::Result<CheckReport> check() const;  // PRAGMA integrity_check, schema version, counts

private:
    struct Impl;
    explicit Store(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> m_impl;
};

}  // namespace shardcast::db
