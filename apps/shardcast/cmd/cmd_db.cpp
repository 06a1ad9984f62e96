// `shardcast db`: what the store holds (db/store.hpp): list, show, export, import, tag, note, delete
// and check. The store does the work; this parses, calls and prints.
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "apps/shardcast/commands.hpp"
#include "apps/shardcast/store_cli.hpp"
#include "core/base/file_io.hpp"
#include "core/base/units.hpp"
#include "core/model/model_io.hpp"
#include "core/plan/plan.hpp"
#include "core/results/run_record.hpp"
#include "simulator/hardware_profile.hpp"

namespace shardcast::cli {
namespace {

namespace fs = std::filesystem;

struct DbOptions {
    std::string kind, tag, id, file, out, name, text;
    std::vector<std::string> tags;
    bool json = false, force = false;
};

std::string localTime(int64_t unix_ms) {
    const std::time_t t = static_cast<std::time_t>(unix_ms / 1000);
    std::tm tm{};
    localtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M", &tm);
    return buf;
}

std::string idList(const std::vector<db::ObjectId>& ids) {
    std::string out;
    for (const auto& id : ids) out += (out.empty() ? "" : ", ") + db::formatId(id);
    return out;
}

nlohmann::ordered_json idsJson(const std::vector<db::ObjectId>& ids) {
    nlohmann::ordered_json a = nlohmann::ordered_json::array();
    for (const auto& id : ids) a.push_back(db::formatId(id));
    return a;
}

nlohmann::ordered_json entryJson(const db::Entry& e) {
    return {{"id", db::formatId(e.id)},   {"kind", std::string(db::kindPluralName(e.id.kind))},
            {"name", e.name},             {"created_unix_ms", e.created_unix_ms},
            {"summary", e.summary},       {"tags", e.tags},
            {"links", idsJson(e.links)}};
}

// Opens the existing store (nothing to list in a store never created); exit code on failure.
std::unique_ptr<db::Store> openExisting(int& exit_code) {
    auto store = openStore(false);
    if (!store) {
        exit_code = reportInputError(store.error().message);
        return nullptr;
    }
    return std::move(*store);
}

core::Result<db::ObjectId> parsedId(const std::string& text) {
    auto id = db::parseId(text);
    if (!id) return core::makeError("ID: " + id.error().message);
    return id;
}

// `db show|export|delete|tag|note ID`: parses ID, opens the existing store and calls
// run(store, id); bad input exits 2 before the store is opened.
template <class Run>
int withObjectId(const DbOptions& o, Run run) {
    auto id = parsedId(o.id);
    if (!id) return reportInputError(id.error().message);
    int code = kExitOk;
    auto store = openExisting(code);
    if (!store) return code;
    return run(*store, *id);
}

int runList(const DbOptions& o) {
    std::optional<db::Kind> kind;
    if (!o.kind.empty()) {
        auto k = db::parseKindPlural(o.kind);
        if (!k) return reportInputError("--kind: " + k.error().message);
        kind = *k;
    }
    int code = kExitOk;
    auto store = openExisting(code);
    if (!store) return code;
    auto entries = store->list(kind, o.tag.empty() ? std::nullopt : std::optional<std::string>(o.tag));
    if (!entries) return reportInputError(entries.error().message);
    if (o.json) {
        nlohmann::ordered_json a = nlohmann::ordered_json::array();
        for (const auto& e : *entries) a.push_back(entryJson(e));
        fmt::print("{}\n", a.dump(2));
        return kExitOk;
    }
    if (entries->empty()) {
        fmt::print("Nothing stored{} in {}\n", o.kind.empty() && o.tag.empty() ? "" : " that matches", store->path().string());
        return kExitOk;
    }
    fmt::print("{:<10} {:<16} {:<20} {}\n", "id", "created", "name", "summary");
    for (const auto& e : *entries) {
        std::string tags;
        for (const auto& t : e.tags) tags += " #" + t;
        fmt::print("{:<10} {:<16} {:<20} {}{}\n", db::formatId(e.id), localTime(e.created_unix_ms), e.name, e.summary, tags);
    }
    fmt::print("{} object{} in {}\n", entries->size(), entries->size() == 1 ? "" : "s", store->path().string());
    return kExitOk;
}

nlohmann::ordered_json objectJson(const db::Object& obj) {
    nlohmann::ordered_json notes = nlohmann::ordered_json::array();
    for (const auto& n : obj.notes) notes.push_back({{"created_unix_ms", n.created_unix_ms}, {"text", n.text}});
    return {{"id", db::formatId(obj.id)},
            {"kind", std::string(db::kindPluralName(obj.id.kind))},
            {"name", obj.name},
            {"created_unix_ms", obj.created_unix_ms},
            {"tags", obj.tags},
            {"notes", notes},
            {"links", idsJson(obj.links)},
            {"body", obj.body}};
}

void printBodyText(const db::Object& obj) {
    const nlohmann::json& b = obj.body;
    auto size = [](const nlohmann::json& j) { return core::formatBytes(static_cast<int64_t>(j.dump().size())); };
    switch (obj.id.kind) {
        case db::Kind::plan:
            fmt::print("Plan\n{}\n", b.at("plan").dump(2));
            fmt::print("Hash            {}\n", b.value("hash", ""));
            break;
        case db::Kind::prediction: {
            const nlohmann::json& s = b.at("summary");
            fmt::print("Made by         shardcast {} (headroom {:g})\n", b.value("shardcast_version", "?"),
                       b.value("headroom", 0.0));
            fmt::print("Step time       {:.3f} ms\n", s.value("step_s", 0.0) * 1e3);
            fmt::print("Peak memory     {}\n", core::formatGiB(s.value("peak_bytes", int64_t{0})));
            fmt::print("MFU             {:.3f}\n", s.value("mfu", 0.0));
            fmt::print("Timeline        {} tasks ({} as JSON)\n", b.at("timeline").value("tasks", nlohmann::json::array()).size(),
                       size(b.at("timeline")));
            fmt::print("Memory curve    {} as JSON\n", size(b.at("memory")));
            break;
        }
        case db::Kind::run: {
            const nlohmann::json& r = b.at("record");
            fmt::print("Backend         {} on {} ranks\n", r.value("backend", "?"), r.value("world_size", 0));
            fmt::print("Compute         {}\n", r.value("compute_note", ""));
            fmt::print("Environment     {}\n", r.value("environment", nlohmann::json::object()).dump());
            fmt::print("Record          {} as JSON (`db export {}` writes it as a run file)\n", size(r), db::formatId(obj.id));
            break;
        }
        case db::Kind::profile:
            fmt::print("Cluster         {}\nSource          {}\nProfile\n{}\n", b.value("cluster", ""), b.value("source", ""),
                       b.at("profile").dump(2));
            break;
        case db::Kind::comparison: {
            const nlohmann::json& r = b.at("report");
            auto pct = [](const nlohmann::json& e) { return e.is_number() ? fmt::format("{:+.2f}%", e.get<double>() * 100) : std::string("n/a"); };
            fmt::print("Step time error {}\n", pct(r.value("step_time_error", nlohmann::json())));
            fmt::print("Peak mem. error {}\n", pct(r.value("peak_memory_error", nlohmann::json())));
            break;
        }
    }
}

int runShow(const DbOptions& o) {
    return withObjectId(o, [&](db::Store& store, const db::ObjectId& oid) -> int {
        auto obj = store.get(oid);
        if (!obj) return reportInputError(obj.error().message);
        if (o.json) {
            fmt::print("{}\n", objectJson(*obj).dump(2));
            return kExitOk;
        }
        fmt::print("{:<16}{}\n", "Id", db::formatId(obj->id));
        if (!obj->name.empty()) fmt::print("{:<16}{}\n", "Name", obj->name);
        fmt::print("{:<16}{}\n", "Created", localTime(obj->created_unix_ms));
        if (!obj->links.empty()) fmt::print("{:<16}{}\n", "Links", idList(obj->links));
        if (auto refs = store.referencedBy(oid); refs && !refs->empty()) fmt::print("{:<16}{}\n", "Referenced by", idList(*refs));
        if (!obj->tags.empty()) {
            std::string tags;
            for (const auto& t : obj->tags) tags += (tags.empty() ? "" : ", ") + t;
            fmt::print("{:<16}{}\n", "Tags", tags);
        }
        for (const auto& n : obj->notes) fmt::print("{:<16}{}  {}\n", "Note", localTime(n.created_unix_ms), n.text);
        printBodyText(*obj);
        return kExitOk;
    });
}

// The object as the file other commands read: a plan file, a run record, a profile; predictions
// and comparisons (which no command reads back) as the store's export document.
core::Result<nlohmann::json> nativeDocument(const db::Store& store, const db::Object& obj) {
    switch (obj.id.kind) {
        case db::Kind::plan: return obj.body.at("plan");
        case db::Kind::run: return obj.body.at("record");
        case db::Kind::profile: return obj.body.at("profile");
        default: return store.exportObject(obj.id);
    }
}

int runExport(const DbOptions& o) {
    return withObjectId(o, [&](db::Store& store, const db::ObjectId& oid) -> int {
        auto obj = store.get(oid);
        if (!obj) return reportInputError(obj.error().message);
        auto doc = o.json ? store.exportObject(oid) : nativeDocument(store, *obj);
        if (!doc) return reportInputError(doc.error().message);
        const std::string text = doc->dump(2) + "\n";
        if (o.out.empty()) {
            fmt::print("{}", text);
            return kExitOk;
        }
        if (auto written = core::writeFileAtomically(o.out, text); !written) {
            return reportInputError("--out: " + written.error().message);
        }
        fmt::print(stderr, "Exported {} to {}\n", db::formatId(oid), o.out);
        return kExitOk;
    });
}

int runImport(const DbOptions& o) {
    auto doc = core::readJsonFile(o.file);
    if (!doc) return reportInputError(doc.error().message);
    if (!doc->is_object()) return reportInputError(o.file + ": not a JSON object (expected a shardcast export, plan, run or profile)");
    const std::string format = doc->value("format", std::string());
    auto store = openStore(true);
    if (!store) return reportInputError(store.error().message);
    const std::string name = o.name.empty() ? fs::path(o.file).stem().string() : o.name;
    core::Result<db::ObjectId> id = core::makeError("");
    std::string what;
    if (format == "shardcast-db-object") {
        id = (*store)->importObject(*doc, o.file);
        what = "store object";
    } else if (format == "shardcast-plan" || (format.empty() && doc->contains("model"))) {
        auto plan = core::loadPlanFile(o.file);
        if (!plan) return reportInputError(plan.error().message);
        auto self = core::selfContainedPlanJson(*plan);
        if (!self) return reportInputError(o.file + ": " + self.error().message);
        id = (*store)->savePlan(*self, name, planSummaryLine(*plan));
        what = "plan";
    } else if (format == "shardcast-run") {
        auto run = core::runRecordFromJson(*doc, o.file);
        if (!run) return reportInputError(run.error().message);
        db::RunInput input;
        input.name = name;
        input.record = core::runRecordToJson(*run);
        auto plan = core::planFromJson(run->plan, o.file + ": plan", fs::path(o.file).parent_path());
        if (plan) {
            if (auto self = core::selfContainedPlanJson(*plan)) {
                // Saved first with its summary line; saveRun finds it again by its hash.
                if (auto saved = (*store)->savePlan(*self, "", planSummaryLine(*plan)); !saved) {
                    fmt::print(stderr, "shardcast: error: {}: {}\n", (*store)->path().string(), saved.error().message);
                    return kExitRuntimeFailure;
                }
                input.plan = std::move(*self);
            }
        }
        input.summary_line = fmt::format("{} on {} ranks, {:.2f} ms/step measured (imported)", run->backend, run->world_size,
                                         static_cast<double>(run->medianStepNs()) * 1e-6);
        id = (*store)->saveRun(input);
        what = "run";
    } else if (format.empty()) {
        // A profile file: keys of sim::HardwareProfile over the defaults of its GPU (or H100-SXM).
        core::ClusterSpec cluster;
        cluster.gpu = *core::findGpuPreset("H100-SXM");
        auto profile = sim::profileFromJson(*doc, o.file, sim::HardwareProfile::fromCluster(cluster));
        if (!profile) {
            return reportInputError(o.file + ": not a shardcast export (format shardcast-db-object), plan, run "
                                    "(shardcast-run) or hardware profile: " + profile.error().message);
        }
        db::ProfileInput input;
        input.name = name;
        input.cluster = profile->gpu.name;
        input.source = "file";
        input.profile = sim::profileToJson(*profile);
        input.summary_line = fmt::format("imported from {}: {}", o.file, profile->gpu.name);
        id = (*store)->saveProfile(input);
        what = "profile";
    } else {
        return reportInputError(fmt::format("{}: format '{}' cannot be imported; valid: shardcast-db-object (`db export "
                                            "ID --json`), shardcast-plan, shardcast-run, or a hardware profile",
                                            o.file, format));
    }
    if (!id) {
        fmt::print(stderr, "shardcast: error: {}: {}\n", (*store)->path().string(), id.error().message);
        return kExitRuntimeFailure;
    }
    fmt::print("Imported {} ({}) as {} in {}\n", o.file, what, db::formatId(*id), (*store)->path().string());
    return kExitOk;
}

int runDelete(const DbOptions& o) {
    return withObjectId(o, [&](db::Store& store, const db::ObjectId& oid) -> int {
        if (!o.force) {
            auto refs = store.referencedBy(oid);
            if (!refs) return reportInputError(refs.error().message);
            if (!refs->empty()) {
                return reportInputError(fmt::format("{} is referenced by {}; `shardcast db delete {} --force` deletes them too",
                                                    db::formatId(oid), idList(*refs), db::formatId(oid)));
            }
        }
        auto removed = store.remove(oid, o.force);
        if (!removed) return reportInputError(removed.error().message);
        fmt::print("Deleted {}\n", idList(*removed));
        return kExitOk;
    });
}

int runTag(const DbOptions& o) {
    return withObjectId(o, [&](db::Store& store, const db::ObjectId& oid) -> int {
        for (const std::string& tag : o.tags) {
            if (auto s = store.addTag(oid, tag); !s) return reportInputError(s.error().message);
        }
        fmt::print("Tagged {}\n", db::formatId(oid));
        return kExitOk;
    });
}

int runNote(const DbOptions& o) {
    return withObjectId(o, [&](db::Store& store, const db::ObjectId& oid) -> int {
        if (auto s = store.addNote(oid, o.text); !s) return reportInputError(s.error().message);
        fmt::print("Noted on {}\n", db::formatId(oid));
        return kExitOk;
    });
}

int runCheck(const DbOptions& o) {
    int code = kExitOk;
    auto store = openExisting(code);
    if (!store) return code;
    auto report = store->check();
    if (!report) {
        fmt::print(stderr, "shardcast: error: {}\n", report.error().message);
        return kExitRuntimeFailure;
    }
    const bool ok = report->integrity == "ok";
    if (o.json) {
        fmt::print("{}\n", nlohmann::ordered_json{{"db", store->path().string()},
                                                 {"schema_version", report->schema_version},
                                                 {"integrity", report->integrity},
                                                 {"plans", report->plans},
                                                 {"predictions", report->predictions},
                                                 {"runs", report->runs},
                                                 {"profiles", report->profiles},
                                                 {"comparisons", report->comparisons},
                                                 {"file_bytes", report->file_bytes}}
                                  .dump(2));
    } else {
        fmt::print("Store           {}\n", store->path().string());
        fmt::print("Schema version  {} (this shardcast: {})\n", report->schema_version, db::kSchemaVersion);
        fmt::print("Integrity       {}\n", report->integrity);
        fmt::print("Objects         {} plans, {} predictions, {} runs, {} profiles, {} comparisons\n", report->plans,
                   report->predictions, report->runs, report->profiles, report->comparisons);
        fmt::print("File size       {}\n", core::formatBytes(report->file_bytes));
    }
    return ok ? kExitOk : kExitRuntimeFailure;
}

}  // namespace

void registerDbCommand(CLI::App& app, int& exit_code) {
    auto o = std::make_shared<DbOptions>();
    CLI::App* cmd = app.add_subcommand("db", "The store of plans, predictions, runs, profiles and comparisons (SQLite; "
                                             "--db chooses the file)");
    cmd->require_subcommand(1);
    cmd->fallthrough();  // `db list --db PATH`: --db belongs to `db`, its subcommands pass it up
    auto sub = [&](const char* name, const char* help, int (*run)(const DbOptions&)) {
        CLI::App* s = cmd->add_subcommand(name, help);
        s->callback([o, run, &exit_code] { exit_code = run(*o); });
        return s;
    };
    const char* id_help = "Object id: plan-N, pred-N, run-N, prof-N or cmp-N (`db list` shows them)";

    CLI::App* list = sub("list", "List stored objects, newest first", runList);
    list->add_option("--kind", o->kind, "Only this kind: plans | predictions | runs | profiles | comparisons")->type_name("KIND");
    list->add_option("--tag", o->tag, "Only objects with this tag")->type_name("TAG");
    list->add_flag("--json", o->json, "Print a JSON array");

    CLI::App* show = sub("show", "Show one object: its fields, links, tags and notes", runShow);
    show->add_option("id", o->id, id_help)->required()->type_name("ID");
    show->add_flag("--json", o->json, "Print the whole object (timelines included) as JSON");

    CLI::App* del = sub("delete", "Delete an object; one that others refer to needs --force, which deletes them too",
                        runDelete);
    del->add_option("id", o->id, id_help)->required()->type_name("ID");
    del->add_flag("--force", o->force, "Also delete every object that refers to it");

    CLI::App* exp = sub("export", "Print an object as the file other commands read (plan file, run record, profile)",
                        runExport);
    exp->add_option("id", o->id, id_help)->required()->type_name("ID");
    exp->add_flag("--json", o->json, "Print the store's export document instead (with its links, for `db import`)");
    exp->add_option("--out", o->out, "Write to FILE (atomically) instead of stdout")->type_name("FILE");

    CLI::App* imp = sub("import", "Import a file: a `db export --json` document, a plan file, a run record or a profile",
                        runImport);
    imp->add_option("file", o->file, "The file to import")->required()->type_name("FILE");
    imp->add_option("--name", o->name, "Name for a plan, run or profile (default: the file's name)")->type_name("NAME");

    CLI::App* tag = sub("tag", "Add tags to an object", runTag);
    tag->add_option("id", o->id, id_help)->required()->type_name("ID");
    tag->add_option("tags", o->tags, "Tags to add")->required()->type_name("TAG...");

    CLI::App* note = sub("note", "Add a free-text note to an object", runNote);
    note->add_option("id", o->id, id_help)->required()->type_name("ID");
    note->add_option("text", o->text, "The note")->required()->type_name("TEXT");

    CLI::App* check = sub("check", "Check the file (PRAGMA integrity_check) and print its schema version and counts; "
                                   "exit 1 when not ok",
                          runCheck);
    check->add_flag("--json", o->json, "Print one JSON object");
}

}  // namespace shardcast::cli
