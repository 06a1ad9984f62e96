#include "db/sqlite.hpp"

#include <chrono>
#include <thread>
#include <utility>

#include <sqlite3.h>

namespace shardcast::db::sqlite {

namespace {

// What a user can do about the codes a full disk, a size limit or permissions produce.
std::string_view hint(int code) {
    switch (code & 0xff) {
        case SQLITE_FULL:
        case SQLITE_IOERR: return "; is the disk full, or the file over this process's size limit (ulimit -f)?";
        case SQLITE_READONLY:
        case SQLITE_CANTOPEN:
        case SQLITE_PERM: return "; are the file and its folder writable by this user?";
        case SQLITE_BUSY:
        case SQLITE_LOCKED: return "; another process held the store for longer than the busy timeout";
        default: return "";
    }
}

core::Error errorOf(sqlite3* db, const std::filesystem::path& path, std::string_view context) {
    const int code = db ? sqlite3_extended_errcode(db) : SQLITE_ERROR;
    const char* message = db ? sqlite3_errmsg(db) : sqlite3_errstr(code);
    return core::makeError(path.string() + ": " + std::string(context) + ": " + message + " (SQLite code " +
                           std::to_string(code) + ")" + std::string(hint(code)));
}

// Statements are long; an error shows their start.
std::string shortSql(const char* sql) {
    std::string text = sql ? sql : "?";
    if (text.size() > 60) text = text.substr(0, 57) + "...";
    return text;
}

}  // namespace

core::Result<std::unique_ptr<Connection>> Connection::open(const std::filesystem::path& path, bool create) {
    sqlite3* db = nullptr;
    const int flags = SQLITE_OPEN_READWRITE | (create ? SQLITE_OPEN_CREATE : 0) | SQLITE_OPEN_NOMUTEX |
                      SQLITE_OPEN_PRIVATECACHE;
    const int rc = sqlite3_open_v2(path.c_str(), &db, flags, nullptr);
    if (rc != SQLITE_OK) {
        core::Error e = errorOf(db, path, "cannot open the database");
        sqlite3_close(db);  // sqlite3_open_v2 returns a handle even on failure; NULL is a no-op
        return e;
    }
    sqlite3_extended_result_codes(db, 1);
    return std::unique_ptr<Connection>(new Connection(db, path));
}

Connection::~Connection() { sqlite3_close_v2(m_db); }

core::Error Connection::error(std::string_view context) const { return errorOf(m_db, m_path, context); }

core::Status Connection::exec(std::string_view sql) {
    const std::string text(sql);
    char* message = nullptr;
    const int rc = sqlite3_exec(m_db, text.c_str(), nullptr, nullptr, &message);
    sqlite3_free(message);  // errmsg carries the same text
    if (rc != SQLITE_OK) return error("executing '" + shortSql(text.c_str()) + "'");
    return core::Ok{};
}

core::Result<Statement> Connection::prepare(std::string_view sql) {
    sqlite3_stmt* stmt = nullptr;
    const int rc = sqlite3_prepare_v3(m_db, sql.data(), static_cast<int>(sql.size()), SQLITE_PREPARE_PERSISTENT,
                                      &stmt, nullptr);
    if (rc != SQLITE_OK) {
        std::string context = "preparing '";
        context.append(shortSql(std::string(sql).c_str())).append("'");
        return error(context);
    }
    return Statement(stmt, this);
}

core::Error Connection::noRow(std::string_view sql) const {
    std::string context = "no row from ";
    context.append(sql);
    return error(context);
}

core::Result<int64_t> Connection::queryInt(std::string_view sql) {
    auto stmt = prepare(sql);
    if (!stmt) return stmt.error();
    auto row = stmt->step();
    if (!row) return row.error();
    if (!*row) return noRow(sql);
    return stmt->columnInt(0);
}

core::Result<std::string> Connection::queryText(std::string_view sql) {
    auto stmt = prepare(sql);
    if (!stmt) return stmt.error();
    auto row = stmt->step();
    if (!row) return row.error();
    if (!*row) return noRow(sql);
    return stmt->columnText(0);
}

core::Status Connection::setBusyTimeoutMs(int ms) {
    if (sqlite3_busy_timeout(m_db, ms) != SQLITE_OK) return error("sqlite3_busy_timeout");
    return core::Ok{};
}

bool Connection::readOnly() const { return sqlite3_db_readonly(m_db, "main") == 1; }

core::Status Connection::enableWal(int timeout_ms) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
        sqlite3_stmt* stmt = nullptr;
        int rc = sqlite3_prepare_v2(m_db, "PRAGMA journal_mode = WAL", -1, &stmt, nullptr);
        std::string mode;
        if (rc == SQLITE_OK) {
            rc = sqlite3_step(stmt);
            if (rc == SQLITE_ROW) {
                const auto* text = sqlite3_column_text(stmt, 0);
                mode = text ? reinterpret_cast<const char*>(text) : "";
                rc = SQLITE_OK;
            }
        }
        const int primary = rc & 0xff;
        if (rc != SQLITE_OK) {
            core::Error e = error("PRAGMA journal_mode = WAL");
            sqlite3_finalize(stmt);
            if ((primary == SQLITE_BUSY || primary == SQLITE_LOCKED) && std::chrono::steady_clock::now() < deadline) {
                std::this_thread::sleep_for(std::chrono::milliseconds(5));
                continue;
            }
            return e;
        }
        sqlite3_finalize(stmt);
        if (mode != "wal") {
            return core::makeError(m_path.string() + ": cannot switch to write-ahead logging (journal_mode stays '" +
                                   mode + "')");
        }
        return core::Ok{};
    }
}

int64_t Connection::lastInsertRowId() const { return sqlite3_last_insert_rowid(m_db); }
int Connection::changes() const { return sqlite3_changes(m_db); }

Statement::Statement(Statement&& other) noexcept
    : m_stmt(std::exchange(other.m_stmt, nullptr)), m_connection(other.m_connection) {}

Statement& Statement::operator=(Statement&& other) noexcept {
    if (this != &other) {
        sqlite3_finalize(m_stmt);
        m_stmt = std::exchange(other.m_stmt, nullptr);
        m_connection = other.m_connection;
    }
    return *this;
}

Statement::~Statement() { sqlite3_finalize(m_stmt); }

namespace {

core::Status bound(int rc, const Connection* c, int index) {
    if (rc == SQLITE_OK) return core::Ok{};
    return c->error("bind parameter " + std::to_string(index));
}

}  // namespace

core::Status Statement::bind(int index, int64_t value) {
    return bound(sqlite3_bind_int64(m_stmt, index, value), m_connection, index);
}

core::Status Statement::bind(int index, double value) {
    return bound(sqlite3_bind_double(m_stmt, index, value), m_connection, index);
}

core::Status Statement::bind(int index, std::string_view text) {
    return bound(sqlite3_bind_text64(m_stmt, index, text.data(), text.size(), SQLITE_TRANSIENT, SQLITE_UTF8),
                 m_connection, index);
}

core::Status Statement::bindBlob(int index, std::span<const uint8_t> bytes) {
    // A zero-length blob is still a blob, not NULL: sqlite3_bind_zeroblob gives it a non-null value.
    if (bytes.empty()) return bound(sqlite3_bind_zeroblob(m_stmt, index, 0), m_connection, index);
    return bound(sqlite3_bind_blob64(m_stmt, index, bytes.data(), bytes.size(), SQLITE_TRANSIENT), m_connection,
                 index);
}

core::Status Statement::bindNull(int index) { return bound(sqlite3_bind_null(m_stmt, index), m_connection, index); }

core::Status Statement::bind(int index, const std::optional<int64_t>& value) {
    return value ? bind(index, *value) : bindNull(index);
}

core::Result<bool> Statement::step() {
    const int rc = sqlite3_step(m_stmt);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    std::string context = "executing '";  // appended: GCC 12 -Wrestrict false positive on concatenation
    context.append(shortSql(sqlite3_sql(m_stmt))).append("'");
    return m_connection->error(context);
}

core::Status Statement::run() {
    for (;;) {
        auto row = step();
        if (!row) return row.error();
        if (!*row) return core::Ok{};
    }
}

void Statement::reset() {
    sqlite3_reset(m_stmt);
    sqlite3_clear_bindings(m_stmt);
}

bool Statement::isNull(int column) const { return sqlite3_column_type(m_stmt, column) == SQLITE_NULL; }
int64_t Statement::columnInt(int column) const { return sqlite3_column_int64(m_stmt, column); }
double Statement::columnDouble(int column) const { return sqlite3_column_double(m_stmt, column); }

std::string Statement::columnText(int column) const {
    const auto* text = sqlite3_column_text(m_stmt, column);
    const int n = sqlite3_column_bytes(m_stmt, column);  // after _text, as the docs require
    return text ? std::string(reinterpret_cast<const char*>(text), static_cast<size_t>(n)) : std::string();
}

std::vector<uint8_t> Statement::columnBlob(int column) const {
    const auto* data = static_cast<const uint8_t*>(sqlite3_column_blob(m_stmt, column));
    const int n = sqlite3_column_bytes(m_stmt, column);
    return data ? std::vector<uint8_t>(data, data + n) : std::vector<uint8_t>();
}

core::Result<Transaction> Transaction::begin(Connection& connection) {
    if (auto st = connection.exec("BEGIN IMMEDIATE"); !st) return st.error();
    return Transaction(&connection);
}

Transaction::Transaction(Transaction&& other) noexcept : m_connection(std::exchange(other.m_connection, nullptr)) {}

Transaction::~Transaction() {
    // A failed ROLLBACK (e.g. SQLite already rolled back after an I/O error) leaves nothing to undo.
    if (m_connection) (void)m_connection->exec("ROLLBACK");
}

core::Status Transaction::commit() {
    if (auto st = m_connection->exec("COMMIT"); !st) return st.error();
    m_connection = nullptr;
    return core::Ok{};
}

}  // namespace shardcast::db::sqlite
