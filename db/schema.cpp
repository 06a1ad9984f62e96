#include "db/schema.hpp"

#include <array>
#include <cassert>

#include "db/store.hpp"

namespace shardcast::db {

namespace {

// Forward migrations: kMigrations[v - 1] takes a store from schema version v - 1 to v. A released
// step never changes; a new version appends one. Tags and notes name their object by kind prefix
// and number, so the triggers of version 2 delete them with it (cascades included: SQLite fires
// triggers for rows that foreign-key actions delete).
constexpr std::array<std::string_view, kSchemaVersion> kMigrations = {
    R"sql(
CREATE TABLE plans (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  name TEXT NOT NULL DEFAULT '',
  created_ms INTEGER NOT NULL,
  summary TEXT NOT NULL DEFAULT '',
  hash TEXT NOT NULL UNIQUE,
  body BLOB NOT NULL,
  body_bytes INTEGER NOT NULL
);
CREATE TABLE profiles (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  name TEXT NOT NULL,
  created_ms INTEGER NOT NULL,
  summary TEXT NOT NULL DEFAULT '',
  cluster TEXT NOT NULL,
  source TEXT NOT NULL,
  body BLOB NOT NULL,
  body_bytes INTEGER NOT NULL
);
CREATE INDEX profiles_by_name ON profiles(name, id);
CREATE TABLE predictions (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  name TEXT NOT NULL DEFAULT '',
  created_ms INTEGER NOT NULL,
  summary TEXT NOT NULL DEFAULT '',
  plan INTEGER NOT NULL REFERENCES plans(id) ON DELETE CASCADE,
  profile INTEGER REFERENCES profiles(id) ON DELETE SET NULL,
  shardcast_version TEXT NOT NULL,
  headroom REAL NOT NULL,
  body BLOB NOT NULL,
  body_bytes INTEGER NOT NULL
);
CREATE INDEX predictions_by_plan ON predictions(plan);
CREATE INDEX predictions_by_profile ON predictions(profile);
CREATE TABLE runs (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  name TEXT NOT NULL DEFAULT '',
  created_ms INTEGER NOT NULL,
  summary TEXT NOT NULL DEFAULT '',
  plan INTEGER REFERENCES plans(id) ON DELETE SET NULL,
  backend TEXT NOT NULL,
  body BLOB NOT NULL,
  body_bytes INTEGER NOT NULL
);
CREATE INDEX runs_by_plan ON runs(plan);
)sql",
    R"sql(
CREATE TABLE comparisons (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  name TEXT NOT NULL DEFAULT '',
  created_ms INTEGER NOT NULL,
  summary TEXT NOT NULL DEFAULT '',
  run INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  prediction INTEGER NOT NULL REFERENCES predictions(id) ON DELETE CASCADE,
  body BLOB NOT NULL,
  body_bytes INTEGER NOT NULL
);
CREATE INDEX comparisons_by_run ON comparisons(run);
CREATE INDEX comparisons_by_prediction ON comparisons(prediction);
CREATE TABLE tags (
  kind TEXT NOT NULL,
  object INTEGER NOT NULL,
  tag TEXT NOT NULL,
  PRIMARY KEY (kind, object, tag)
) WITHOUT ROWID;
CREATE INDEX tags_by_tag ON tags(tag, kind);
CREATE TABLE notes (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  kind TEXT NOT NULL,
  object INTEGER NOT NULL,
  created_ms INTEGER NOT NULL,
  text TEXT NOT NULL
);
CREATE INDEX notes_by_object ON notes(kind, object);
CREATE TRIGGER plans_forget AFTER DELETE ON plans BEGIN
  DELETE FROM tags WHERE kind = 'plan' AND object = OLD.id;
  DELETE FROM notes WHERE kind = 'plan' AND object = OLD.id;
END;
CREATE TRIGGER predictions_forget AFTER DELETE ON predictions BEGIN
  DELETE FROM tags WHERE kind = 'pred' AND object = OLD.id;
  DELETE FROM notes WHERE kind = 'pred' AND object = OLD.id;
END;
CREATE TRIGGER runs_forget AFTER DELETE ON runs BEGIN
  DELETE FROM tags WHERE kind = 'run' AND object = OLD.id;
  DELETE FROM notes WHERE kind = 'run' AND object = OLD.id;
END;
CREATE TRIGGER profiles_forget AFTER DELETE ON profiles BEGIN
  DELETE FROM tags WHERE kind = 'prof' AND object = OLD.id;
  DELETE FROM notes WHERE kind = 'prof' AND object = OLD.id;
END;
CREATE TRIGGER comparisons_forget AFTER DELETE ON comparisons BEGIN
  DELETE FROM tags WHERE kind = 'cmp' AND object = OLD.id;
  DELETE FROM notes WHERE kind = 'cmp' AND object = OLD.id;
END;
)sql"};

}  // namespace

std::string_view migrationTo(int version) {
    assert(version >= 1 && version <= kSchemaVersion);
    return kMigrations[static_cast<size_t>(version - 1)];
}

}  // namespace shardcast::db
