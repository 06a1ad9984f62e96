#include "core/base/json_text.hpp"

#include <algorithm>
#include <optional>
#include <set>
#include <vector>

#include <nlohmann/json.hpp>

namespace shardcast::core {

using json = nlohmann::json;

namespace {

struct Position {
    size_t line = 1, column = 1;
};

// Line and column (1-based) of byte `offset` in `text`.
Position positionOf(std::string_view text, size_t offset) {
    Position p;
    for (size_t i = 0; i < offset && i < text.size(); ++i) {
        if (text[i] == '\n') {
            ++p.line;
            p.column = 1;
        } else {
            ++p.column;
        }
    }
    return p;
}

std::string at(const std::string& where, std::string_view text, size_t offset) {
    const Position p = positionOf(text, offset);
    return where + ": line " + std::to_string(p.line) + ", column " + std::to_string(p.column);
}

// Byte offset of the first bracket nested deeper than kMaxJsonDepth, or npos. One pass, no
// allocation: strings (with their escapes) are skipped, so brackets inside them do not count.
size_t tooDeepAt(std::string_view text) {
    int depth = 0;
    bool in_string = false, escaped = false;
    for (size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (in_string) {
            if (escaped) {
                escaped = false;
            } else if (c == '\\') {
                escaped = true;
            } else if (c == '"') {
                in_string = false;
            }
            continue;
        }
        if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            if (++depth > kMaxJsonDepth) return i;
        } else if (c == ']' || c == '}') {
            depth = std::max(0, depth - 1);
        }
    }
    return std::string_view::npos;
}

// nlohmann's message without its "[json.exception.<kind>.<id>] " prefix and, for parse errors,
// without "parse error at line L, column C: " (we print our own position).
std::string parserMessage(const std::string& what) {
    std::string m = what;
    if (const size_t c = m.find("column"); c != std::string::npos) {
        if (const size_t colon = m.find(": ", c); colon != std::string::npos) return m.substr(colon + 2);
    }
    if (const size_t bracket = m.find("] "); bracket != std::string::npos) m = m.substr(bracket + 2);
    return m;
}

}  // namespace

Result<json> parseJsonText(std::string_view text, const std::string& where) {
    if (const size_t deep = tooDeepAt(text); deep != std::string_view::npos) {
        return makeError(at(where, text, deep) + ": arrays and objects nest deeper than " +
                         std::to_string(kMaxJsonDepth) + " levels (the limit; see docs/limits.md)");
    }
    // Keys seen in each open object, innermost last: a repeated key would silently take the
    // last value, so it is an error naming the key.
    std::vector<std::set<std::string>> open_objects;
    std::optional<std::string> duplicate;
    auto callback = [&](int /*depth*/, json::parse_event_t event, json& parsed) {
        switch (event) {
            case json::parse_event_t::object_start: open_objects.emplace_back(); break;
            case json::parse_event_t::object_end:
                if (!open_objects.empty()) open_objects.pop_back();
                break;
            case json::parse_event_t::key:
                if (!open_objects.empty() && parsed.is_string() &&
                    !open_objects.back().insert(parsed.get<std::string>()).second && !duplicate) {
                    duplicate = parsed.get<std::string>();
                }
                break;
            default: break;
        }
        return true;
    };
    try {
        json j = json::parse(text.begin(), text.end(), callback);
        if (duplicate) {
            return makeError(where + ": duplicate key '" + textExcerpt(*duplicate) +
                             "' in one object (each key may appear once; remove one of them)");
        }
        return j;
    } catch (const json::parse_error& e) {
        const size_t byte = std::min<size_t>(e.byte, text.size() + 1);
        return makeError(where + ": malformed JSON at line " + std::to_string(positionOf(text, byte - 1).line) +
                         ", column " + std::to_string(positionOf(text, byte - 1).column) + ": " +
                         textExcerpt(parserMessage(e.what())));
    } catch (const json::out_of_range& e) {
        // 1e400 and the like: no double holds them.
        return makeError(where + ": a number is out of range (" + textExcerpt(parserMessage(e.what())) +
                         "); numbers must fit a double (at most about 1.8e308)");
    } catch (const json::exception& e) {
        return makeError(where + ": cannot parse JSON: " + textExcerpt(parserMessage(e.what())));
    }
}

std::string textExcerpt(std::string_view text) {
    if (text.size() <= kMaxExcerptChars) return std::string(text);
    size_t cut = kMaxExcerptChars;
    // Back up to the start of a UTF-8 sequence (continuation bytes are 10xxxxxx).
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
    return std::string(text.substr(0, cut)) + "...";
}

std::string jsonExcerpt(const json& value) {
    // Count nodes with an explicit stack, stopping early: small values are printed whole (then
    // cut), large ones described, so the work is bounded whatever the value.
    constexpr size_t kMaxNodes = 32;
    size_t nodes = 0;
    std::vector<const json*> stack{&value};
    while (!stack.empty() && nodes <= kMaxNodes) {
        const json* v = stack.back();
        stack.pop_back();
        ++nodes;
        if (v->is_structured()) {
            for (const json& child : *v) {
                stack.push_back(&child);
                if (stack.size() > kMaxNodes) break;
            }
        }
    }
    if (nodes > kMaxNodes || !stack.empty()) {
        return std::string(value.is_array() ? "an array of " : "an object of ") + std::to_string(value.size()) +
               (value.is_array() ? " items" : " keys");
    }
    return textExcerpt(value.dump(-1, ' ', false, json::error_handler_t::replace));
}

bool isValidUtf8(std::string_view text) {
    size_t i = 0;
    const size_t n = text.size();
    while (i < n) {
        const auto c = static_cast<unsigned char>(text[i]);
        size_t len = 0;
        uint32_t cp = 0;
        if (c < 0x80) {
            ++i;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            len = 2;
            cp = c & 0x1F;
        } else if ((c & 0xF0) == 0xE0) {
            len = 3;
            cp = c & 0x0F;
        } else if ((c & 0xF8) == 0xF0) {
            len = 4;
            cp = c & 0x07;
        } else {
            return false;
        }
        if (i + len > n) return false;
        for (size_t k = 1; k < len; ++k) {
            const auto cc = static_cast<unsigned char>(text[i + k]);
            if ((cc & 0xC0) != 0x80) return false;
            cp = (cp << 6) | (cc & 0x3F);
        }
        // Overlong forms, UTF-16 surrogates and code points past U+10FFFF are not UTF-8.
        if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10FFFF ||
            (cp >= 0xD800 && cp <= 0xDFFF)) {
            return false;
        }
        i += len;
    }
    return true;
}

Status checkUtf8(std::string_view text, const std::string& what) {
    if (isValidUtf8(text)) return Ok{};
    return makeError(what + ": is not valid UTF-8 (plans, traces and the store are UTF-8 JSON); "
                            "use a UTF-8 name");
}

}  // namespace shardcast::core
