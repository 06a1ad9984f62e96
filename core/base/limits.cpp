#include "core/base/limits.hpp"

#include <algorithm>
#include <regex>

#include <fmt/format.h>

#include "core/base/json_text.hpp"

namespace shardcast::core::limits {

Status checkModuleName(std::string_view name, const std::string& what) {
    if (static_cast<int64_t>(name.size()) > kMaxNameBytes) {
        return makeError(fmt::format("{}: a module name is at most {} bytes (got {} bytes: '{}')", what, kMaxNameBytes,
                                     name.size(), textExcerpt(name)));
    }
    const int64_t parts = name.empty() ? 0 : 1 + static_cast<int64_t>(std::count(name.begin(), name.end(), '.'));
    if (parts > kMaxNameParts) {
        return makeError(fmt::format("{}: a module name has at most {} dotted parts (got {}: '{}')", what,
                                     kMaxNameParts, parts, textExcerpt(name)));
    }
    return Ok{};
}

Status checkFrozenPattern(const std::string& pattern, const std::string& what) {
    if (auto utf8 = checkUtf8(pattern, what); !utf8) return utf8.error();
    if (static_cast<int64_t>(pattern.size()) > kMaxRegexBytes) {
        return makeError(fmt::format("{}: the pattern is at most {} bytes (got {}: '{}')", what, kMaxRegexBytes,
                                     pattern.size(), textExcerpt(pattern)));
    }
    // Nesting of groups and bracket expressions; escaped characters do not count.
    int64_t depth = 0, deepest = 0;
    for (size_t i = 0; i < pattern.size(); ++i) {
        if (pattern[i] == '\\') {
            ++i;
        } else if (pattern[i] == '(') {
            deepest = std::max(deepest, ++depth);
        } else if (pattern[i] == ')') {
            --depth;
        }
    }
    if (deepest > kMaxRegexNesting) {
        return makeError(fmt::format("{}: groups nest at most {} levels deep (got {}: '{}')", what, kMaxRegexNesting,
                                     deepest, textExcerpt(pattern)));
    }
    try {
        std::regex check(pattern, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
        return makeError(fmt::format("{}: invalid regular expression '{}' ({})", what, textExcerpt(pattern), e.what()));
    }
    return Ok{};
}

Status checkIntRange(int64_t v, int64_t lo, int64_t hi, const std::string& what) {
    if (v >= lo && v <= hi) return Ok{};
    return makeError(fmt::format("{} must be from {} to {} (got {})", what, lo, hi, v));
}

}  // namespace shardcast::core::limits
