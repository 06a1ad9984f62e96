#pragma once
// Files the user keeps and documents other processes read back: atomic writes and versioned JSON.
#include <filesystem>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "core/result.hpp"

namespace shardcast::core {

// Writes `content` to a temporary file beside `path`, flushes and fsyncs it, then renames it over
// `path`: a reader sees the old file or the new one, never a truncated mix. A failure at any step
// (open, write, flush, fsync, rename) is an error naming the file; the old file is left as it was.
Status writeFileAtomically(const std::filesystem::path& path, std::string_view content);

// Versioned documents carry {"format": "shardcast-<kind>", "version": N} at the top level.
// `documentHeader` starts such an object; `checkDocumentHeader` accepts versions 1..supported and
// refuses a newer one with a message naming `where`, the file's version and the version read here.
nlohmann::json documentHeader(std::string_view kind, int version);
Status checkDocumentHeader(const nlohmann::json& j, std::string_view kind, int supported_version,
                           const std::string& where);

}  // namespace shardcast::core
