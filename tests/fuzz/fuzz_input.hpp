#pragma once
// Shared by the fuzz targets: the bytes of one input parsed as shardcast parses a JSON file it reads
// (core::parseJsonText, the half of readJsonFile after the bounded read), so that every input a user
// could put in a file reaches the loader under test through the same code.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/model/model_io.hpp"

namespace shardcast::fuzz {

inline constexpr const char* kWhere = "fuzz-input.json";

inline std::optional<nlohmann::json> parseInput(const uint8_t* data, size_t size) {
    auto j = core::parseJsonText(std::string_view(reinterpret_cast<const char*>(data), size), kWhere);
    if (!j) return std::nullopt;
    return std::move(*j);
}

}  // namespace shardcast::fuzz
