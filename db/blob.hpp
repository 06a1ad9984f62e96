#pragma once
// How the store keeps a JSON document in a BLOB column.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/base/result.hpp"

namespace shardcast::db {

// A blob is the zlib stream (RFC 1950) of the document's compact JSON text; its length before
// compression is kept beside it so reading allocates once and detects a damaged blob.
struct Blob {
    std::vector<uint8_t> bytes;
    int64_t text_bytes = 0;
};

Blob compressDocument(const nlohmann::json& document);
// `where` names the file and the object in the error of a damaged blob.
core::Result<nlohmann::json> decompressDocument(const std::vector<uint8_t>& bytes, int64_t text_bytes,
                                                const std::string& where);

}  // namespace shardcast::db
