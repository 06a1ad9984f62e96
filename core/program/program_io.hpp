#pragma once
// A Program as a versioned JSON document ("format": "shardcast-program", "version": 1), so that a
// Program lowered by one process is executed or inspected by another. Enums are written by name
// (taskKindName, streamName, categoryName, dtypeName, groupKindName, opShapeKindName); spans as
// [offset, count] into the pools "deps", "mem" and "ops", exactly as in core/program/program.hpp.
#include <filesystem>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "core/base/result.hpp"
#include "core/program/program.hpp"

namespace shardcast::core {

constexpr int kProgramFormatVersion = 1;

nlohmann::json programToJson(const Program& program);

// Checks every field's type and range and every enum name, then the Program's contracts
// (validateProgram); an error names `where` (the file) and the field, or the task. Refuses a
// document of a newer format version, naming both versions.
Result<Program> programFromJson(const nlohmann::json& j, const std::string& where);

// The document written atomically (core/base/file_io.hpp) and read back.
Status writeProgramFile(const std::filesystem::path& path, const Program& program);
Result<Program> loadProgramFile(const std::filesystem::path& path);

}  // namespace shardcast::core
