#pragma once
// Building a Model: from a HuggingFace config.json, from shardcast's module-tree JSON, or by a
// bundled name. Every error names the file and field and says what would be valid.
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/base/json_text.hpp"
#include "core/base/result.hpp"
#include "core/model/model.hpp"

namespace shardcast::core {

// model_type: llama, mistral, mixtral, qwen2, gemma2, gpt2, gpt_neox.
Result<Model> importHfConfig(const nlohmann::json& config, std::string name, std::string source);

// The module-tree format of docs/module-tree-format.md (`"format": "shardcast-module-tree/1"`).
Result<Model> importModuleTree(const nlohmann::json& tree, std::string name, std::string source);

// Reads a file and dispatches on its content (module tree if it has "format", else HF config).
Result<Model> loadModelFile(const std::filesystem::path& path);

// The bundled models directory: $SHARDCAST_MODELS_DIR if set; else the installed layout beside
// the running executable (bin/../share/shardcast/models) if it exists; else the source tree's
// models/ folder this build was configured from.
std::filesystem::path bundledModelsDir();
std::vector<std::string> bundledModelNames();  // sorted, file names without .json

// A bundled name ("llama-3.1-8b") or a path to a config / module-tree file.
Result<Model> resolveModel(std::string_view name_or_path);

// Reads and parses a JSON file; the error names the file and the line/column of a syntax error.
// Files over kMaxJsonFileBytes and paths that are not regular files are refused (core/base/file_io.hpp).
Result<nlohmann::json> readJsonFile(const std::filesystem::path& path);
// The parsing half of readJsonFile, for text from elsewhere (the fuzz targets): parseJsonText in
// core/base/json_text.hpp.

}  // namespace shardcast::core
