#pragma once
// Files the user keeps and documents other processes read back: atomic writes and versioned JSON.
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "core/base/result.hpp"

namespace shardcast::core {

// Caps on the files shardcast reads (docs/limits.md, "Files"): no real input comes near them, and
// they keep a wrong path (a disk image, a log) from being read into memory whole.
inline constexpr int64_t kMaxJsonFileBytes = int64_t{64} << 20;   // configs, plans, profiles, run records
inline constexpr int64_t kMaxTextFileBytes = int64_t{16} << 20;   // module lists (modules:FILE)

// Reads the whole of a file the user named. Refuses anything but a regular file (a directory, a
// device such as /dev/zero, a FIFO; symbolic links to a regular file are followed) and a file over
// `max_bytes`, without blocking and without reading past the cap. Errors name the file, what it is
// (`what`, e.g. "plan file") and the cap.
Result<std::string> readFileBounded(const std::filesystem::path& path, int64_t max_bytes, std::string_view what);

// "64 MiB": a byte cap for an error message.
std::string formatByteCap(int64_t bytes);

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
