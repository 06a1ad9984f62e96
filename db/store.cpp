#include "db/store.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <system_error>
#include <unordered_map>
#include <utility>

#include "core/base/file_io.hpp"
#include "core/base/version.hpp"
#include "db/blob.hpp"
#include "db/schema.hpp"
#include "db/sha256.hpp"
#include "db/sqlite.hpp"

namespace shardcast::db {

namespace fs = std::filesystem;
using core::makeError;
using core::Ok;
using core::Result;
using core::Status;
using nlohmann::json;

namespace {

constexpr int kBusyTimeoutMs = 10'000;
constexpr int kExportVersion = 1;

struct KindInfo {
    Kind kind;
    std::string_view prefix;    // in ids and in the tags / notes tables
    std::string_view singular;  // an exported object's "kind"
    std::string_view plural;    // the table, and `db list --kind`
};

constexpr std::array<KindInfo, 5> kKinds = {{{Kind::plan, "plan", "plan", "plans"},
                                              {Kind::prediction, "pred", "prediction", "predictions"},
                                              {Kind::run, "run", "run", "runs"},
                                              {Kind::profile, "prof", "profile", "profiles"},
                                              {Kind::comparison, "cmp", "comparison", "comparisons"}}};

const KindInfo& info(Kind kind) { return kKinds[static_cast<size_t>(kind)]; }

// Every reference between objects, as the schema's foreign keys declare them (db/schema.cpp):
// `cascade` deletes the referring object with its target, otherwise the reference becomes NULL.
struct Link {
    Kind from;
    std::string_view column;
    Kind to;
    bool cascade;
};

constexpr std::array<Link, 5> kLinks = {{{Kind::prediction, "plan", Kind::plan, true},
                                          {Kind::prediction, "profile", Kind::profile, false},
                                          {Kind::run, "plan", Kind::plan, false},
                                          {Kind::comparison, "run", Kind::run, true},
                                          {Kind::comparison, "prediction", Kind::prediction, true}}};

int64_t nowUnixMs() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
}

std::string join(const std::vector<ObjectId>& ids) {
    std::string out;
    for (const ObjectId& id : ids) {
        if (!out.empty()) out += ", ";
        out += formatId(id);
    }
    return out;
}

uint32_t bigEndian(const unsigned char* p, int bytes) {
    uint32_t v = 0;
    for (int i = 0; i < bytes; ++i) v = v << 8 | p[i];
    return v;
}

// What the file's own 100-byte header says (https://www.sqlite.org/fileformat2.html section 1.3),
// read without SQLite so a refused file is never opened for writing.
struct Header {
    int64_t user_version = 0;
    int64_t application_id = 0;
};

Result<Header> readHeader(const fs::path& path) {
    const std::string shown = path.string();
    std::error_code ec;
    const auto file_bytes = static_cast<int64_t>(fs::file_size(path, ec));
    if (ec) return makeError(shown + ": cannot read the file size: " + ec.message());
    std::ifstream in(path, std::ios::binary);
    if (!in) return makeError(shown + ": cannot open the file for reading");
    std::array<unsigned char, 100> h{};
    in.read(reinterpret_cast<char*>(h.data()), static_cast<std::streamsize>(h.size()));
    const auto got = in.gcount();
    static constexpr char kMagic[] = "SQLite format 3";  // 16 bytes with its NUL
    if (got < 16 || !std::equal(kMagic, kMagic + 16, h.begin())) {
        return makeError(shown + ": not a SQLite database (no \"SQLite format 3\" header); not a shardcast store");
    }
    if (got < 100) {
        return makeError(shown + ": truncated SQLite database (" + std::to_string(got) +
                         " bytes, shorter than its 100-byte header)");
    }
    // Offset 16: page size (1 means 65536); 28: pages in the file, valid when the change counter (24)
    // equals version-valid-for (92).
    const int64_t page_size = bigEndian(&h[16], 2) == 1 ? 65536 : bigEndian(&h[16], 2);
    const int64_t pages = bigEndian(&h[28], 4);
    const bool count_valid = pages != 0 && bigEndian(&h[24], 4) == bigEndian(&h[92], 4);
    // With a write-ahead log beside it, pages not yet checkpointed live in the log and the main file
    // may legitimately be shorter; SQLite's own recovery decides then.
    const auto wal_bytes = fs::file_size(fs::path(shown + "-wal"), ec);
    const bool has_wal = !ec && wal_bytes > 0;
    if (count_valid && !has_wal && file_bytes < page_size * pages) {
        return makeError(shown + ": truncated SQLite database: " + std::to_string(file_bytes) + " bytes, its header says " +
                         std::to_string(pages) + " pages of " + std::to_string(page_size) + " bytes (" +
                         std::to_string(page_size * pages) + " bytes)");
    }
    return Header{bigEndian(&h[60], 4), bigEndian(&h[68], 4)};
}

Status checkVersions(const fs::path& path, int64_t application_id, int64_t user_version) {
    if (application_id != kApplicationId) {
        return makeError(path.string() + ": a SQLite database of another application (application_id " +
                         std::to_string(application_id) + "), not a shardcast store; give another --db file");
    }
    if (user_version > kSchemaVersion) {
        return makeError(path.string() + ": schema version " + std::to_string(user_version) +
                         " is newer than this shardcast reads (" + std::to_string(kSchemaVersion) +
                         "); use a newer shardcast (this is " + std::string(core::kShardcastVersion) +
                         ") or another --db file");
    }
    return Ok{};
}

std::string kindList() {
    std::string out;
    for (const KindInfo& k : kKinds) {
        if (!out.empty()) out += ", ";
        out += k.plural;
    }
    return out;
}

}  // namespace

std::string formatId(const ObjectId& id) { return std::string(info(id.kind).prefix) + "-" + std::to_string(id.number); }

Result<ObjectId> parseId(std::string_view text) {
    auto bad = [&] {
        std::string message = "'";  // appended: GCC 12 -Wrestrict false positive on "'" + string
        message.append(text);
        return makeError(message + "' is not an object id; ids are plan-N, pred-N, run-N, prof-N or cmp-N (N >= 1)");
    };
    const size_t dash = text.find('-');
    if (dash == std::string_view::npos) return bad();
    const std::string_view prefix = text.substr(0, dash), digits = text.substr(dash + 1);
    const auto k = std::find_if(kKinds.begin(), kKinds.end(), [&](const KindInfo& i) { return i.prefix == prefix; });
    if (k == kKinds.end() || digits.empty() || digits.size() > 18 || digits[0] == '0' ||
        !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        return bad();
    }
    return ObjectId{k->kind, std::stoll(std::string(digits))};
}

std::string_view kindPluralName(Kind kind) { return info(kind).plural; }

Result<Kind> parseKindPlural(std::string_view text) {
    for (const KindInfo& k : kKinds) {
        if (k.plural == text) return k.kind;
    }
    return makeError("unknown kind '" + std::string(text) + "'; valid: " + kindList());
}

Result<fs::path> defaultDbPath() {
    if (const char* db = std::getenv("SHARDCAST_DB"); db && *db) return fs::path(db);
    const fs::path tail = fs::path("shardcast") / "shardcast.db";
    if (const char* xdg = std::getenv("XDG_DATA_HOME"); xdg && *xdg && fs::path(xdg).is_absolute()) {
        return fs::path(xdg) / tail;
    }
    const char* home = std::getenv("HOME");
    if (!home || !*home) {
        return makeError("no store file: set SHARDCAST_DB, XDG_DATA_HOME or HOME, or give --db PATH");
    }
    return fs::path(home) / ".local" / "share" / tail;
}

struct Store::Impl {
    std::unique_ptr<sqlite::Connection> db;
    std::unordered_map<std::string, std::unique_ptr<sqlite::Statement>> statements;

    std::string where(const ObjectId& id) const { return db->path().string() + ": " + formatId(id); }

    // A cached prepared statement, reset (bindings cleared) when the Query goes out of scope so no
    // read transaction outlives its use.
    class Query {
    public:
        explicit Query(sqlite::Statement* s) : m_s(s) {}
        ~Query() { if (m_s) m_s->reset(); }
        Query(const Query&) = delete;
        Query& operator=(const Query&) = delete;
        sqlite::Statement* operator->() const { return m_s; }
        sqlite::Statement& operator*() const { return *m_s; }

    private:
        sqlite::Statement* m_s;
    };

    Result<sqlite::Statement*> statement(const std::string& sql) {
        auto it = statements.find(sql);
        if (it == statements.end()) {
            auto s = db->prepare(sql);
            if (!s) return s.error();
            it = statements.emplace(sql, std::make_unique<sqlite::Statement>(std::move(*s))).first;
        }
        return it->second.get();
    }

    Result<bool> exists(const ObjectId& id) {
        auto s = statement("SELECT 1 FROM " + std::string(info(id.kind).plural) + " WHERE id = ?1");
        if (!s) return s.error();
        Query q(*s);
        if (auto st = q->bind(1, id.number); !st) return st.error();
        return q->step();
    }

    Status requireExists(const ObjectId& id) {
        auto found = exists(id);
        if (!found) return found.error();
        if (!*found) return makeError(where(id) + ": no such object in the store");
        return Ok{};
    }

    // The common columns (name, created_ms, summary, body, body_bytes) then the kind's own.
    Result<ObjectId> insert(Kind kind, std::string_view name, int64_t created_ms, std::string_view summary,
                            const json& document, const std::vector<std::pair<std::string_view, json>>& extra) {
        std::string columns = "name, created_ms, summary, body, body_bytes", values = "?1, ?2, ?3, ?4, ?5";
        for (size_t i = 0; i < extra.size(); ++i) {
            columns += ", " + std::string(extra[i].first);
            values += ", ?" + std::to_string(6 + i);
        }
        auto s = statement("INSERT INTO " + std::string(info(kind).plural) + " (" + columns + ") VALUES (" + values + ")");
        if (!s) return s.error();
        Query q(*s);
        const Blob blob = compressDocument(document);
        for (Status st : {q->bind(1, name), q->bind(2, created_ms), q->bind(3, summary), q->bindBlob(4, blob.bytes),
                          q->bind(5, blob.text_bytes)}) {
            if (!st) return st.error();
        }
        for (size_t i = 0; i < extra.size(); ++i) {
            const int index = static_cast<int>(6 + i);
            const json& v = extra[i].second;
            Status st = v.is_null()             ? q->bindNull(index)
                        : v.is_number_integer() ? q->bind(index, v.get<int64_t>())
                        : v.is_number()         ? q->bind(index, v.get<double>())
                                                : q->bind(index, v.get<std::string>());
            if (!st) return st.error();
        }
        if (auto st = q->run(); !st) return st.error();
        return ObjectId{kind, db->lastInsertRowId()};
    }

    Result<ObjectId> insertPlan(const json& plan, std::string_view name, std::string_view summary, int64_t created_ms) {
        const std::string hash = sha256Hex(plan.dump());
        {
            auto s = statement("SELECT id, name FROM plans WHERE hash = ?1");
            if (!s) return s.error();
            Query q(*s);
            if (auto st = q->bind(1, hash); !st) return st.error();
            auto row = q->step();
            if (!row) return row.error();
            if (*row) {
                const ObjectId id{Kind::plan, q->columnInt(0)};
                if (!name.empty() && q->columnText(1).empty()) {
                    auto u = statement("UPDATE plans SET name = ?1 WHERE id = ?2");
                    if (!u) return u.error();
                    Query update(*u);
                    if (auto st = update->bind(1, name); !st) return st.error();
                    if (auto st = update->bind(2, id.number); !st) return st.error();
                    if (auto st = update->run(); !st) return st.error();
                }
                return id;
            }
        }
        return insert(Kind::plan, name, created_ms, summary, plan, {{"hash", hash}});
    }

    Result<ObjectId> insertPrediction(const PredictionInput& in, std::string_view version, int64_t created_ms) {
        if (in.profile) {
            if (in.profile->kind != Kind::profile) {
                return makeError(db->path().string() + ": " + formatId(*in.profile) + " is not a profile (prof-N)");
            }
            if (auto st = requireExists(*in.profile); !st) return st.error();
        }
        auto plan = insertPlan(in.plan, "", "", created_ms);
        if (!plan) return plan.error();
        const json doc = {{"summary", in.summary}, {"timeline", in.timeline}, {"memory", in.memory}};
        return insert(Kind::prediction, in.name, created_ms, in.summary_line, doc,
                      {{"plan", plan->number},
                       {"profile", in.profile ? json(in.profile->number) : json(nullptr)},
                       {"shardcast_version", std::string(version)},
                       {"headroom", in.headroom}});
    }

    Result<ObjectId> insertRun(const RunInput& in, int64_t created_ms) {
        json plan_id = nullptr;
        if (in.plan) {
            auto plan = insertPlan(*in.plan, "", "", created_ms);
            if (!plan) return plan.error();
            plan_id = plan->number;
        }
        const auto backend = in.record.find("backend");
        const std::string backend_name = backend != in.record.end() && backend->is_string() ? backend->get<std::string>() : "";
        return insert(Kind::run, in.name, created_ms, in.summary_line, in.record,
                      {{"plan", plan_id}, {"backend", backend_name}});
    }

    Result<ObjectId> insertProfile(const ProfileInput& in, int64_t created_ms) {
        if (in.name.empty()) return makeError(db->path().string() + ": a profile needs a name");
        // The same figures under the same name again (a GPU's preset figures, saved with every
        // prediction made on them) are the newest profile of that name, not a copy of it.
        auto s = statement("SELECT id FROM profiles WHERE name = ?1 ORDER BY id DESC LIMIT 1");
        if (!s) return s.error();
        std::optional<int64_t> newest;
        {
            Query q(*s);
            if (auto st = q->bind(1, in.name); !st) return st.error();
            auto row = q->step();
            if (!row) return row.error();
            if (*row) newest = q->columnInt(0);
        }
        if (newest) {
            auto existing = read(ObjectId{Kind::profile, *newest});
            if (!existing) return existing.error();
            const json& b = existing->body;
            if (b.value("cluster", std::string()) == in.cluster && b.value("source", std::string()) == in.source &&
                b.value("profile", json()) == in.profile) {
                return existing->id;
            }
        }
        return insert(Kind::profile, in.name, created_ms, in.summary_line, in.profile,
                      {{"cluster", in.cluster}, {"source", in.source}});
    }

    Result<ObjectId> insertComparison(const ComparisonInput& in, int64_t created_ms) {
        if (in.run.kind != Kind::run) return makeError(db->path().string() + ": " + formatId(in.run) + " is not a run (run-N)");
        if (in.prediction.kind != Kind::prediction) {
            return makeError(db->path().string() + ": " + formatId(in.prediction) + " is not a prediction (pred-N)");
        }
        if (auto st = requireExists(in.run); !st) return st.error();
        if (auto st = requireExists(in.prediction); !st) return st.error();
        return insert(Kind::comparison, in.name, created_ms, in.summary_line, in.report,
                      {{"run", in.run.number}, {"prediction", in.prediction.number}});
    }

    // Tags and notes name their object as (?1 kind prefix, ?2 number).
    static Status bindObject(sqlite::Statement& s, const ObjectId& id) {
        if (auto st = s.bind(1, info(id.kind).prefix); !st) return st;
        return s.bind(2, id.number);
    }

    Status insertTag(const ObjectId& id, std::string_view tag) {
        if (tag.empty()) return makeError(where(id) + ": a tag cannot be empty");
        if (auto st = requireExists(id); !st) return st;
        auto s = statement("INSERT OR IGNORE INTO tags (kind, object, tag) VALUES (?1, ?2, ?3)");
        if (!s) return s.error();
        Query q(*s);
        if (auto st = bindObject(*q, id); !st) return st;
        if (auto st = q->bind(3, tag); !st) return st;
        return q->run();
    }

    Status insertNote(const ObjectId& id, std::string_view text, int64_t created_ms) {
        if (auto st = requireExists(id); !st) return st;
        auto s = statement("INSERT INTO notes (kind, object, created_ms, text) VALUES (?1, ?2, ?3, ?4)");
        if (!s) return s.error();
        Query q(*s);
        if (auto st = bindObject(*q, id); !st) return st;
        if (auto st = q->bind(3, created_ms); !st) return st;
        if (auto st = q->bind(4, text); !st) return st;
        return q->run();
    }

    Result<std::vector<std::string>> tagsOf(const ObjectId& id) {
        auto s = statement("SELECT tag FROM tags WHERE kind = ?1 AND object = ?2 ORDER BY tag");
        if (!s) return s.error();
        Query q(*s);
        if (auto st = bindObject(*q, id); !st) return st.error();
        std::vector<std::string> tags;
        for (;;) {
            auto row = q->step();
            if (!row) return row.error();
            if (!*row) return tags;
            tags.push_back(q->columnText(0));
        }
    }

    Result<std::vector<Note>> notesOf(const ObjectId& id) {
        auto s = statement("SELECT created_ms, text FROM notes WHERE kind = ?1 AND object = ?2 ORDER BY id");
        if (!s) return s.error();
        Query q(*s);
        if (auto st = bindObject(*q, id); !st) return st.error();
        std::vector<Note> notes;
        for (;;) {
            auto row = q->step();
            if (!row) return row.error();
            if (!*row) return notes;
            notes.push_back(Note{q->columnInt(0), q->columnText(1)});
        }
    }

    // The kind's link columns in kLinks order, for the SELECTs of get and list.
    static std::string linkColumns(Kind kind) {
        std::string out;
        for (const Link& l : kLinks) {
            if (l.from == kind) out += ", " + std::string(l.column);
        }
        return out;
    }

    static std::vector<ObjectId> readLinks(Kind kind, const sqlite::Statement& s, int first_column) {
        std::vector<ObjectId> links;
        int column = first_column;
        for (const Link& l : kLinks) {
            if (l.from != kind) continue;
            if (!s.isNull(column)) links.push_back(ObjectId{l.to, s.columnInt(column)});
            ++column;
        }
        return links;
    }

    static std::string_view extraColumns(Kind kind) {
        switch (kind) {
            case Kind::plan: return ", hash, ''";
            case Kind::prediction: return ", shardcast_version, headroom";
            case Kind::run: return ", backend, ''";
            case Kind::profile: return ", cluster, source";
            case Kind::comparison: return ", '', ''";
        }
        return "";
    }

    Result<std::vector<Entry>> list(std::optional<Kind> kind, const std::optional<std::string>& tag);

    Result<Object> read(const ObjectId& id) {
        const std::string sql = "SELECT name, created_ms, summary, body, body_bytes" + std::string(extraColumns(id.kind)) +
                                linkColumns(id.kind) + " FROM " + std::string(info(id.kind).plural) + " WHERE id = ?1";
        auto s = statement(sql);
        if (!s) return s.error();
        Object object;
        object.id = id;
        json document;
        {
            Query q(*s);
            if (auto st = q->bind(1, id.number); !st) return st.error();
            auto row = q->step();
            if (!row) return row.error();
            if (!*row) return makeError(where(id) + ": no such object in the store");
            object.name = q->columnText(0);
            object.created_unix_ms = q->columnInt(1);
            auto doc = decompressDocument(q->columnBlob(3), q->columnInt(4), where(id));
            if (!doc) return doc.error();
            document = std::move(*doc);
            object.links = readLinks(id.kind, **s, 7);
            auto link = [&](size_t i) { return i < object.links.size() ? json(formatId(object.links[i])) : json(nullptr); };
            switch (id.kind) {
                case Kind::plan: object.body = {{"plan", std::move(document)}, {"hash", q->columnText(5)}}; break;
                case Kind::prediction: {
                    const bool has_profile = !q->isNull(8);
                    json body = std::move(document);
                    body["plan"] = formatId(ObjectId{Kind::plan, q->columnInt(7)});
                    body["profile"] = has_profile ? json(formatId(ObjectId{Kind::profile, q->columnInt(8)})) : json(nullptr);
                    body["shardcast_version"] = q->columnText(5);
                    body["headroom"] = q->columnDouble(6);
                    object.body = std::move(body);
                    break;
                }
                case Kind::run: {
                    const auto env = document.find("environment");
                    object.body = {{"plan", link(0)},
                                   {"backend", q->columnText(5)},
                                   {"environment", env != document.end() ? *env : json(nullptr)},
                                   {"record", std::move(document)}};
                    break;
                }
                case Kind::profile:
                    object.body = {{"cluster", q->columnText(5)}, {"source", q->columnText(6)}, {"profile", std::move(document)}};
                    break;
                case Kind::comparison:
                    object.body = {{"run", link(0)}, {"prediction", link(1)}, {"report", std::move(document)}};
                    break;
            }
        }
        auto tags = tagsOf(id);
        if (!tags) return tags.error();
        object.tags = std::move(*tags);
        auto notes = notesOf(id);
        if (!notes) return notes.error();
        object.notes = std::move(*notes);
        return object;
    }

    // Direct referrers of `id`, per link; `cascade_only` keeps those deleted with it.
    Result<std::vector<ObjectId>> referrers(const ObjectId& id, bool cascade_only) {
        std::vector<ObjectId> out;
        for (const Link& l : kLinks) {
            if (l.to != id.kind || (cascade_only && !l.cascade)) continue;
            auto s = statement("SELECT id FROM " + std::string(info(l.from).plural) + " WHERE " + std::string(l.column) +
                               " = ?1 ORDER BY id");
            if (!s) return s.error();
            Query q(*s);
            if (auto st = q->bind(1, id.number); !st) return st.error();
            for (;;) {
                auto row = q->step();
                if (!row) return row.error();
                if (!*row) break;
                out.push_back(ObjectId{l.from, q->columnInt(0)});
            }
        }
        return out;
    }

    Result<json> exportDocument(const ObjectId& id) {
        auto object = read(id);
        if (!object) return object.error();
        json notes = json::array();
        for (const Note& n : object->notes) notes.push_back({{"created_unix_ms", n.created_unix_ms}, {"text", n.text}});
        json linked = json::object();
        for (const ObjectId& link : object->links) {
            auto doc = exportDocument(link);
            if (!doc) return doc.error();
            linked[formatId(link)] = std::move(*doc);
        }
        auto summary = statement("SELECT summary FROM " + std::string(info(id.kind).plural) + " WHERE id = ?1");
        if (!summary) return summary.error();
        Query q(*summary);
        if (auto st = q->bind(1, id.number); !st) return st.error();
        if (auto row = q->step(); !row) return row.error();
        json doc = core::documentHeader("db-object", kExportVersion);
        doc["kind"] = std::string(info(id.kind).singular);
        doc["id"] = formatId(id);
        doc["name"] = object->name;
        doc["created_unix_ms"] = object->created_unix_ms;
        doc["summary"] = q->columnText(0);
        doc["tags"] = object->tags;
        doc["notes"] = std::move(notes);
        doc["body"] = std::move(object->body);
        doc["linked"] = std::move(linked);
        return doc;
    }

    // Imports `doc` and, first, what it links to; `imported` maps exported ids to new ones so an
    // object linked twice (a comparison's run and prediction sharing a plan) is created once.
    Result<ObjectId> importDocument(const json& doc, const std::string& where, std::map<std::string, ObjectId>& imported);
};

namespace {

// Field readers for import: each error names the document and the field.
Result<std::string> textField(const json& j, std::string_view key, const std::string& where) {
    const auto it = j.find(std::string(key));
    if (it == j.end() || !it->is_string()) return makeError(where + ": " + std::string(key) + " must be a string");
    return it->get<std::string>();
}

Result<const json*> field(const json& j, std::string_view key, const std::string& where) {
    const auto it = j.find(std::string(key));
    if (it == j.end()) return makeError(where + ": " + std::string(key) + " is missing");
    return &*it;
}

}  // namespace

Result<ObjectId> Store::Impl::importDocument(const json& doc, const std::string& where,
                                              std::map<std::string, ObjectId>& imported) {
    if (!doc.is_object()) return makeError(where + ": an exported object must be a JSON object");
    if (auto st = core::checkDocumentHeader(doc, "db-object", kExportVersion, where); !st) return st.error();
    auto kind_text = textField(doc, "kind", where);
    if (!kind_text) return kind_text.error();
    auto id_text = textField(doc, "id", where);
    if (!id_text) return id_text.error();
    auto old_id = parseId(*id_text);
    if (!old_id) return makeError(where + ": id: " + old_id.error().message);
    if (info(old_id->kind).singular != *kind_text) return makeError(where + ": kind '" + *kind_text + "' does not match id " + *id_text);
    if (auto it = imported.find(*id_text); it != imported.end()) return it->second;
    const std::string here = where + ": " + *id_text;
    auto name = textField(doc, "name", here);
    if (!name) return name.error();
    auto summary = textField(doc, "summary", here);
    if (!summary) return summary.error();
    const auto created = doc.find("created_unix_ms");
    if (created == doc.end() || !created->is_number_integer()) return makeError(here + ": created_unix_ms must be an integer");
    const int64_t created_ms = created->get<int64_t>();
    auto body_field = field(doc, "body", here);
    if (!body_field) return body_field.error();
    const json& body = **body_field;
    if (!body.is_object()) return makeError(here + ": body must be an object");
    const auto linked_it = doc.find("linked");
    const json linked = linked_it != doc.end() && linked_it->is_object() ? *linked_it : json::object();

    // A link field of the body ("plan": "plan-3") is imported from `linked` and yields the new id.
    auto link = [&](std::string_view key, bool optional) -> Result<std::optional<ObjectId>> {
        const auto v = body.find(std::string(key));
        if (v == body.end() || v->is_null()) {
            if (optional) return std::optional<ObjectId>();
            return makeError(here + ": body." + std::string(key) + " is missing");
        }
        if (!v->is_string()) return makeError(here + ": body." + std::string(key) + " must be an id string");
        const auto target = linked.find(v->get<std::string>());
        if (target == linked.end()) {
            return makeError(here + ": body." + std::string(key) + " " + v->get<std::string>() + " is not in linked");
        }
        auto id = importDocument(*target, where, imported);
        if (!id) return id.error();
        return std::optional<ObjectId>(*id);
    };
    auto member = [&](std::string_view key) -> Result<json> {
        auto f = field(body, key, here + ": body");
        if (!f) return f.error();
        return **f;
    };

    Result<ObjectId> id = makeError("unreachable");
    switch (old_id->kind) {
        case Kind::plan: {
            auto plan = member("plan");
            if (!plan) return plan.error();
            id = insertPlan(*plan, *name, *summary, created_ms);
            break;
        }
        case Kind::profile: {
            auto cluster = textField(body, "cluster", here + ": body");
            auto source = textField(body, "source", here + ": body");
            auto profile = member("profile");
            if (!cluster) return cluster.error();
            if (!source) return source.error();
            if (!profile) return profile.error();
            id = insertProfile(ProfileInput{*name, *cluster, *source, *profile, *summary}, created_ms);
            break;
        }
        case Kind::prediction: {
            auto plan = link("plan", false);
            if (!plan) return plan.error();
            auto profile = link("profile", true);
            if (!profile) return profile.error();
            auto version = textField(body, "shardcast_version", here + ": body");
            if (!version) return version.error();
            const auto headroom = body.find("headroom");
            if (headroom == body.end() || !headroom->is_number()) return makeError(here + ": body.headroom must be a number");
            auto plan_doc = read(**plan);
            if (!plan_doc) return plan_doc.error();
            PredictionInput in;
            in.name = *name;
            in.plan = plan_doc->body.at("plan");
            in.profile = *profile;
            in.headroom = headroom->get<double>();
            for (auto [key, out] : {std::pair{"summary", &in.summary}, {"timeline", &in.timeline}, {"memory", &in.memory}}) {
                auto v = member(key);
                if (!v) return v.error();
                *out = std::move(*v);
            }
            in.summary_line = *summary;
            id = insertPrediction(in, *version, created_ms);
            break;
        }
        case Kind::run: {
            auto plan = link("plan", true);
            if (!plan) return plan.error();
            auto record = member("record");
            if (!record) return record.error();
            RunInput in{*name, std::nullopt, std::move(*record), *summary};
            if (*plan) {
                auto plan_doc = read(**plan);
                if (!plan_doc) return plan_doc.error();
                in.plan = plan_doc->body.at("plan");
            }
            id = insertRun(in, created_ms);
            break;
        }
        case Kind::comparison: {
            auto run = link("run", false);
            if (!run) return run.error();
            auto prediction = link("prediction", false);
            if (!prediction) return prediction.error();
            auto report = member("report");
            if (!report) return report.error();
            id = insertComparison(ComparisonInput{*name, **run, **prediction, std::move(*report), *summary}, created_ms);
            break;
        }
    }
    if (!id) return id.error();
    if (const auto tags = doc.find("tags"); tags != doc.end() && tags->is_array()) {
        for (const json& t : *tags) {
            if (!t.is_string()) return makeError(here + ": tags must be strings");
            if (auto st = insertTag(*id, t.get<std::string>()); !st) return st.error();
        }
    }
    if (const auto notes = doc.find("notes"); notes != doc.end() && notes->is_array()) {
        for (const json& n : *notes) {
            auto text = textField(n, "text", here + ": notes[]");
            if (!text) return text.error();
            const auto t = n.find("created_unix_ms");
            const int64_t ms = t != n.end() && t->is_number_integer() ? t->get<int64_t>() : nowUnixMs();
            if (auto st = insertNote(*id, *text, ms); !st) return st.error();
        }
    }
    imported.emplace(*id_text, *id);
    return id;
}

Store::Store(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
Store::~Store() = default;

const fs::path& Store::path() const { return m_impl->db->path(); }

Result<std::unique_ptr<Store>> Store::open(const fs::path& path, bool create) {
    const std::string shown = path.string();
    std::error_code ec;
    const bool existed = fs::exists(path, ec);
    if (existed) {
        if (!fs::is_regular_file(path, ec)) return makeError(shown + ": not a regular file; not a shardcast store");
        // An empty file is what SQLite itself treats as a new database.
        if (fs::file_size(path, ec) > 0) {
            auto header = readHeader(path);
            if (!header) return header.error();
            // A file of ours never has application_id 0 once created; 0 with tables is checked below.
            if (header->application_id != 0) {
                if (auto st = checkVersions(path, header->application_id, header->user_version); !st) return st.error();
            } else if (header->user_version > 0) {
                if (auto st = checkVersions(path, 0, header->user_version); !st) return st.error();
            }
        }
    } else {
        if (!create) return makeError(shown + ": no such store (create one by saving to it)");
        if (path.has_parent_path()) {
            fs::create_directories(path.parent_path(), ec);
            if (ec) return makeError(shown + ": cannot create its folder " + path.parent_path().string() + ": " + ec.message());
        }
    }

    auto connection = sqlite::Connection::open(path, !existed || create);
    if (!connection) return connection.error();
    auto impl = std::make_unique<Impl>();
    impl->db = std::move(*connection);
    sqlite::Connection& db = *impl->db;
    if (db.readOnly()) {
        return makeError(shown + ": the file is read-only; the store needs write access, also to read (its write-ahead log); are the "
                         "file and its folder writable by this user?");
    }
    if (auto st = db.setBusyTimeoutMs(kBusyTimeoutMs); !st) return st.error();
    if (auto st = db.exec("PRAGMA foreign_keys = ON"); !st) return st.error();

    // The authoritative check (the header may lag a write-ahead log), still before any write, in one
    // statement so the three values come from one snapshot (another process may be creating the store).
    int64_t app_id = 0, version = 0, objects = 0;
    {
        auto s = db.prepare("SELECT (SELECT application_id FROM pragma_application_id), "
                            "(SELECT user_version FROM pragma_user_version), (SELECT count(*) FROM sqlite_schema)");
        if (!s) return s.error();
        auto row = s->step();
        if (!row) return row.error();
        app_id = s->columnInt(0);
        version = s->columnInt(1);
        objects = s->columnInt(2);
    }
    if (app_id != 0 || version != 0 || objects > 0) {
        if (auto st = checkVersions(path, app_id, version); !st) return st.error();
    }

    // Only now write. WAL lets readers go on while one process writes (https://www.sqlite.org/wal.html).
    // synchronous=FULL: in WAL mode NORMAL may lose the last commits on a power cut (not on a
    // process crash); a save that reported success must survive both, at one fsync per commit.
    auto mode = db.queryText("PRAGMA journal_mode");
    if (!mode) return mode.error();
    if (*mode != "wal") {
        if (auto st = db.enableWal(kBusyTimeoutMs); !st) return st.error();
    }
    if (auto st = db.exec("PRAGMA synchronous = FULL"); !st) return st.error();

    if (version < kSchemaVersion) {
        auto tx = sqlite::Transaction::begin(db);
        if (!tx) return tx.error();
        // Another process may have migrated between the check above and the lock.
        auto current = db.queryInt("PRAGMA user_version");
        if (!current) return current.error();
        if (auto st = checkVersions(path, kApplicationId, *current); !st) return st.error();
        for (int64_t v = *current; v < kSchemaVersion; ++v) {
            if (auto st = db.exec(migrationTo(static_cast<int>(v + 1))); !st) {
                return makeError(shown + ": migration to schema version " + std::to_string(v + 1) + " failed: " +
                                 st.error().message);
            }
        }
        // PRAGMA arguments cannot be bound; both are our own integers.
        if (auto st = db.exec("PRAGMA application_id = " + std::to_string(kApplicationId)); !st) return st.error();
        if (auto st = db.exec("PRAGMA user_version = " + std::to_string(kSchemaVersion)); !st) return st.error();
        if (auto st = tx->commit(); !st) return st.error();
    }
    return std::unique_ptr<Store>(new Store(std::move(impl)));
}

namespace {

// Runs `body` in one BEGIN IMMEDIATE transaction; commits only when it succeeded.
template <class F>
auto inTransaction(sqlite::Connection& db, F&& body) -> decltype(body()) {
    auto tx = sqlite::Transaction::begin(db);
    if (!tx) return tx.error();
    auto result = body();
    if (!result) return result;
    if (auto st = tx->commit(); !st) return st.error();
    return result;
}

// Runs the reads of `body` on one snapshot (a writer may commit between two of them otherwise).
template <class F>
auto inReadTransaction(sqlite::Connection& db, F&& body) -> decltype(body()) {
    if (auto st = db.exec("BEGIN"); !st) return st.error();
    auto result = body();
    (void)db.exec("COMMIT");  // ends a transaction that only read: nothing to lose if it fails
    return result;
}

}  // namespace

Result<ObjectId> Store::savePlan(const json& self_contained_plan, std::string_view name, std::string_view summary_line) {
    return inTransaction(*m_impl->db, [&] { return m_impl->insertPlan(self_contained_plan, name, summary_line, nowUnixMs()); });
}

Result<ObjectId> Store::savePrediction(const PredictionInput& input) {
    return inTransaction(*m_impl->db,
                         [&] { return m_impl->insertPrediction(input, core::kShardcastVersion, nowUnixMs()); });
}

Result<ObjectId> Store::saveRun(const RunInput& input) {
    return inTransaction(*m_impl->db, [&] { return m_impl->insertRun(input, nowUnixMs()); });
}

Result<ObjectId> Store::saveProfile(const ProfileInput& input) {
    return inTransaction(*m_impl->db, [&] { return m_impl->insertProfile(input, nowUnixMs()); });
}

Result<ObjectId> Store::saveComparison(const ComparisonInput& input) {
    return inTransaction(*m_impl->db, [&] { return m_impl->insertComparison(input, nowUnixMs()); });
}

Status Store::addTag(const ObjectId& id, std::string_view tag) {
    return inTransaction(*m_impl->db, [&] { return m_impl->insertTag(id, tag); });
}

Status Store::addNote(const ObjectId& id, std::string_view text) {
    return inTransaction(*m_impl->db, [&] { return m_impl->insertNote(id, text, nowUnixMs()); });
}

Result<std::vector<Entry>> Store::list(std::optional<Kind> kind, std::optional<std::string> tag) const {
    return inReadTransaction(*m_impl->db, [&] { return m_impl->list(kind, tag); });
}

Result<std::vector<Entry>> Store::Impl::list(std::optional<Kind> kind, const std::optional<std::string>& tag) {
    std::vector<Entry> entries;
    for (const KindInfo& k : kKinds) {
        if (kind && *kind != k.kind) continue;
        std::map<int64_t, std::vector<std::string>> tags;
        {
            auto s = statement("SELECT object, tag FROM tags WHERE kind = ?1 ORDER BY tag");
            if (!s) return s.error();
            Query q(*s);
            if (auto st = q->bind(1, k.prefix); !st) return st.error();
            for (;;) {
                auto row = q->step();
                if (!row) return row.error();
                if (!*row) break;
                tags[q->columnInt(0)].push_back(q->columnText(1));
            }
        }
        std::string sql = "SELECT id, name, created_ms, summary" + linkColumns(k.kind) + " FROM " +
                          std::string(k.plural);
        if (tag) sql += " WHERE id IN (SELECT object FROM tags WHERE kind = ?1 AND tag = ?2)";
        sql += " ORDER BY created_ms DESC, id DESC";
        auto s = statement(sql);
        if (!s) return s.error();
        Query q(*s);
        if (tag) {
            if (auto st = q->bind(1, k.prefix); !st) return st.error();
            if (auto st = q->bind(2, *tag); !st) return st.error();
        }
        for (;;) {
            auto row = q->step();
            if (!row) return row.error();
            if (!*row) break;
            Entry e;
            e.id = ObjectId{k.kind, q->columnInt(0)};
            e.name = q->columnText(1);
            e.created_unix_ms = q->columnInt(2);
            e.summary = q->columnText(3);
            e.links = readLinks(k.kind, **s, 4);
            if (auto t = tags.find(e.id.number); t != tags.end()) e.tags = std::move(t->second);
            entries.push_back(std::move(e));
        }
    }
    std::stable_sort(entries.begin(), entries.end(),
                     [](const Entry& a, const Entry& b) { return a.created_unix_ms > b.created_unix_ms; });
    return entries;
}

Result<Object> Store::get(const ObjectId& id) const {
    return inReadTransaction(*m_impl->db, [&] { return m_impl->read(id); });
}

Result<Object> Store::profileByName(std::string_view name) const {
    auto s = m_impl->statement("SELECT id FROM profiles WHERE name = ?1 ORDER BY id DESC LIMIT 1");
    if (!s) return s.error();
    int64_t number = 0;
    {
        Impl::Query q(*s);
        if (auto st = q->bind(1, name); !st) return st.error();
        auto row = q->step();
        if (!row) return row.error();
        if (!*row) return makeError(path().string() + ": no profile named '" + std::string(name) + "' in the store");
        number = q->columnInt(0);
    }
    return get(ObjectId{Kind::profile, number});
}

Result<std::vector<ObjectId>> Store::referencedBy(const ObjectId& id) const {
    if (auto st = m_impl->requireExists(id); !st) return st.error();
    return m_impl->referrers(id, false);
}

Result<std::vector<ObjectId>> Store::remove(const ObjectId& id, bool force) {
    Impl& impl = *m_impl;
    return inTransaction(*impl.db, [&]() -> Result<std::vector<ObjectId>> {
        if (auto st = impl.requireExists(id); !st) return st.error();
        auto direct = impl.referrers(id, false);
        if (!direct) return direct.error();
        if (!direct->empty() && !force) {
            return makeError(impl.where(id) + ": referenced by " + join(*direct) +
                             "; delete those first or use --force (which deletes what depends on it: "
                             "predictions of a plan, comparisons of a run or prediction; runs and predictions "
                             "only lose their link to a deleted plan or profile)");
        }
        // What the foreign keys' ON DELETE CASCADE will remove with it, found before deleting.
        std::vector<ObjectId> removed{id};
        for (size_t i = 0; i < removed.size(); ++i) {
            auto more = impl.referrers(removed[i], true);
            if (!more) return more.error();
            for (const ObjectId& m : *more) {
                if (std::find(removed.begin(), removed.end(), m) == removed.end()) removed.push_back(m);
            }
        }
        auto s = impl.statement("DELETE FROM " + std::string(info(id.kind).plural) + " WHERE id = ?1");
        if (!s) return s.error();
        {
            Impl::Query q(*s);
            if (auto st = q->bind(1, id.number); !st) return st.error();
            if (auto st = q->run(); !st) return st.error();
        }
        for (const ObjectId& r : removed) {
            auto still = impl.exists(r);
            if (!still) return still.error();
            assert(!*still && "the cascade set and the schema's foreign keys disagree");
        }
        return removed;
    });
}

Result<json> Store::exportObject(const ObjectId& id) const {
    return inReadTransaction(*m_impl->db, [&] { return m_impl->exportDocument(id); });
}

Result<ObjectId> Store::importObject(const json& document, const std::string& where) {
    return inTransaction(*m_impl->db, [&] {
        std::map<std::string, ObjectId> imported;
        return m_impl->importDocument(document, where, imported);
    });
}

Result<CheckReport> Store::check() const {
    sqlite::Connection& db = *m_impl->db;
    CheckReport report;
    auto version = db.queryInt("PRAGMA user_version");
    if (!version) return version.error();
    report.schema_version = static_cast<int>(*version);
    auto s = db.prepare("PRAGMA integrity_check");
    if (!s) return s.error();
    for (;;) {
        auto row = s->step();
        if (!row) return row.error();
        if (!*row) break;
        if (!report.integrity.empty()) report.integrity += "\n";
        report.integrity += s->columnText(0);
    }
    for (auto [kind, count] : {std::pair{Kind::plan, &report.plans}, {Kind::prediction, &report.predictions},
                               {Kind::run, &report.runs}, {Kind::profile, &report.profiles},
                               {Kind::comparison, &report.comparisons}}) {
        auto n = db.queryInt("SELECT count(*) FROM " + std::string(info(kind).plural));
        if (!n) return n.error();
        *count = *n;
    }
    std::error_code ec;
    report.file_bytes = static_cast<int64_t>(fs::file_size(path(), ec));
    return report;
}

}  // namespace shardcast::db
