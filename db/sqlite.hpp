#pragma once
// A small RAII layer over the SQLite C API (https://www.sqlite.org/c3ref/intro.html): a connection,
// prepared statements bound by index, and a BEGIN IMMEDIATE transaction that rolls back unless
// committed. Only this file pair calls sqlite3_*; every error names the call, SQLite's message
// (sqlite3_errmsg) and the database file.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/result.hpp"

struct sqlite3;
struct sqlite3_stmt;

namespace shardcast::db::sqlite {

class Statement;

class Connection {
public:
    // SQLITE_OPEN_READWRITE (| SQLITE_OPEN_CREATE with `create`), no shared cache, extended result codes.
    static core::Result<std::unique_ptr<Connection>> open(const std::filesystem::path& path, bool create);
    ~Connection();
    Connection(const Connection&) = delete;
    Connection& operator=(const Connection&) = delete;

    const std::filesystem::path& path() const { return m_path; }
    // Runs SQL text with no parameters (schema, pragmas); `sql` is never built from user data.
    core::Status exec(std::string_view sql);
    core::Result<Statement> prepare(std::string_view sql);
    // The first column of the first row of a parameterless query, as an integer or text.
    core::Result<int64_t> queryInt(std::string_view sql);
    core::Result<std::string> queryText(std::string_view sql);
    core::Status setBusyTimeoutMs(int ms);
    // PRAGMA journal_mode = WAL, retried for up to `timeout_ms`: the switch needs the file to itself,
    // and SQLite answers SQLITE_BUSY at once, without the busy handler, while another connection
    // has it open (two processes creating one store at the same time).
    core::Status enableWal(int timeout_ms);
    // SQLite opens a file it may not write read-only, silently (sqlite3_db_readonly tells).
    bool readOnly() const;
    int64_t lastInsertRowId() const;
    int changes() const;

    // "FILE: CONTEXT: MESSAGE (CODE)" for the connection's last error.
    core::Error error(std::string_view context) const;

private:
    core::Error noRow(std::string_view sql) const;
    Connection(sqlite3* db, std::filesystem::path path) : m_db(db), m_path(std::move(path)) {}
    sqlite3* m_db;
    std::filesystem::path m_path;
};

class Statement {
public:
    Statement(Statement&& other) noexcept;
    Statement& operator=(Statement&& other) noexcept;
    ~Statement();

    // Parameters are 1-based, as in sqlite3_bind_*.
    core::Status bind(int index, int64_t value);
    core::Status bind(int index, double value);
    core::Status bind(int index, std::string_view text);
    core::Status bindBlob(int index, std::span<const uint8_t> bytes);
    core::Status bindNull(int index);
    core::Status bind(int index, const std::optional<int64_t>& value);

    // true: a row is ready; false: done.
    core::Result<bool> step();
    // step() to completion for a statement that returns no rows.
    core::Status run();
    // Clears the bindings too, so a statement reused in a loop never keeps a stale value.
    void reset();

    // Columns are 0-based, as in sqlite3_column_*.
    bool isNull(int column) const;
    int64_t columnInt(int column) const;
    double columnDouble(int column) const;
    std::string columnText(int column) const;
    std::vector<uint8_t> columnBlob(int column) const;

private:
    friend class Connection;
    Statement(sqlite3_stmt* stmt, const Connection* connection) : m_stmt(stmt), m_connection(connection) {}
    sqlite3_stmt* m_stmt;
    const Connection* m_connection;
};

// BEGIN IMMEDIATE takes the write lock up front, so two writers wait on the busy timeout instead of
// failing with SQLITE_BUSY at their first write inside a deferred transaction
// (https://www.sqlite.org/lang_transaction.html).
class Transaction {
public:
    static core::Result<Transaction> begin(Connection& connection);
    Transaction(Transaction&& other) noexcept;
    Transaction& operator=(Transaction&&) = delete;
    ~Transaction();  // ROLLBACK unless commit() succeeded
    core::Status commit();

private:
    explicit Transaction(Connection* connection) : m_connection(connection) {}
    Connection* m_connection;
};

}  // namespace shardcast::db::sqlite
