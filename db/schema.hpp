#pragma once
// The store's schema: its application id and its forward migrations, one SQL script per version.
// The links between kinds in db/store.cpp (kLinks) mirror the foreign keys declared here.
#include <cstdint>
#include <string_view>

namespace shardcast::db {

// PRAGMA application_id (https://www.sqlite.org/pragma.html#pragma_application_id): "SHCS" in
// ASCII, so a shardcast store is told apart from any other application's SQLite file.
constexpr int64_t kApplicationId = 0x53484353;

// The SQL that takes a store from schema version `version - 1` to `version` (1..kSchemaVersion).
std::string_view migrationTo(int version);

}  // namespace shardcast::db
