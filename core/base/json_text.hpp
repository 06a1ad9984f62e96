#pragma once
// JSON text the user gave us, parsed without trusting it: nesting depth capped before parsing
// (nlohmann's dump and error paths recurse once per level), duplicate keys refused, numbers out
// of range and invalid UTF-8 reported as errors naming the file; and bounded excerpts of bad
// values for error messages.
#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "core/base/result.hpp"

namespace shardcast::core {

// Deepest nesting of arrays and objects a document may have (docs/limits.md). Our formats nest
// at most 6 levels; HuggingFace configs a few more.
inline constexpr int kMaxJsonDepth = 64;
// Longest excerpt of a bad value an error message quotes.
inline constexpr std::size_t kMaxExcerptChars = 80;

// Parses `text`; every error starts with `where` (the file) and says what is wrong and where.
Result<nlohmann::json> parseJsonText(std::string_view text, const std::string& where);

// The value as JSON text, at most about kMaxExcerptChars characters ("..." marks a cut); a large
// array or object is described by its size instead. Never throws, never recurses on its input.
std::string jsonExcerpt(const nlohmann::json& value);
// `text` cut to kMaxExcerptChars characters (at a UTF-8 boundary), "..." marking a cut.
std::string textExcerpt(std::string_view text);

bool isValidUtf8(std::string_view text);
// An error naming `what` (a flag or field) when `text` is not UTF-8: it would be written into
// JSON documents (plans, traces, the store), which hold only UTF-8.
Status checkUtf8(std::string_view text, const std::string& what);

}  // namespace shardcast::core
