#include "db/blob.hpp"

#include <cassert>

#include <zlib.h>

#include "core/base/json_text.hpp"

namespace shardcast::db {

using core::makeError;
using core::Result;
using nlohmann::json;

namespace {

// zlib level 1: timelines of numbers still shrink several-fold, and saving stays fast (bench/db_bench.cpp).
constexpr int kCompressionLevel = 1;

}  // namespace

Blob compressDocument(const json& document) {
    // Invalid UTF-8 in a string is replaced (U+FFFD) rather than thrown: a save never aborts on it.
    const std::string text = document.dump(-1, ' ', false, json::error_handler_t::replace);
    uLongf size = compressBound(static_cast<uLong>(text.size()));
    Blob blob;
    blob.bytes.resize(size);
    const int rc = compress2(blob.bytes.data(), &size, reinterpret_cast<const Bytef*>(text.data()),
                             static_cast<uLong>(text.size()), kCompressionLevel);
    assert(rc == Z_OK);  // the buffer is compressBound-sized and the level valid
    (void)rc;
    blob.bytes.resize(size);
    blob.text_bytes = static_cast<int64_t>(text.size());
    return blob;
}

Result<json> decompressDocument(const std::vector<uint8_t>& bytes, int64_t text_bytes, const std::string& where) {
    // zlib's one-shot API takes 32-bit lengths; a damaged length must not become a huge allocation.
    if (text_bytes < 0 || text_bytes > int64_t{0xffffffff}) {
        return makeError(where + ": stored document is damaged (length " + std::to_string(text_bytes) + ")");
    }
    std::string text(static_cast<size_t>(text_bytes), '\0');
    uLongf size = static_cast<uLongf>(text.size());
    const int rc = uncompress(reinterpret_cast<Bytef*>(text.data()), &size, bytes.data(), static_cast<uLong>(bytes.size()));
    if (rc != Z_OK || size != static_cast<uLongf>(text_bytes)) {
        return makeError(where + ": stored document is damaged (zlib: " + zError(rc) + ")");
    }
    auto parsed = core::parseJsonText(text, where);
    if (!parsed) return makeError(where + ": stored document is not valid JSON (" + parsed.error().message + ")");
    return parsed;
}

}  // namespace shardcast::db
