#include "trace/kineto_reader.hpp"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <simdjson.h>
#include <zlib.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace shardcast::trace {
namespace {

using core::Result;

constexpr size_t kChunkBytes = size_t{1} << 20;

// A source of bytes: a file, a gzip stream over a file, or memory. read() returns 0 at the end.
class Source {
public:
    virtual ~Source() = default;
    virtual Result<size_t> read(char* dst, size_t cap) = 0;
};

class FileSource final : public Source {
public:
    explicit FileSource(std::FILE* f) : m_f(f) {}
    ~FileSource() override { std::fclose(m_f); }
    FileSource(const FileSource&) = delete;
    FileSource& operator=(const FileSource&) = delete;
    Result<size_t> read(char* dst, size_t cap) override {
        const size_t n = std::fread(dst, 1, cap, m_f);
        if (n == 0 && std::ferror(m_f)) return core::makeError("read error");
        return n;
    }

private:
    std::FILE* m_f;
};

class MemorySource final : public Source {
public:
    explicit MemorySource(std::string_view bytes) : m_bytes(bytes) {}
    Result<size_t> read(char* dst, size_t cap) override {
        const size_t n = std::min(cap, m_bytes.size() - m_pos);
        std::memcpy(dst, m_bytes.data() + m_pos, n);
        m_pos += n;
        return n;
    }

private:
    std::string_view m_bytes;
    size_t m_pos = 0;
};

// Inflates gzip members one after another (what `gzip` and Python's gzip module write).
class GzipSource final : public Source {
public:
    explicit GzipSource(std::unique_ptr<Source> inner) : m_inner(std::move(inner)), m_in(kChunkBytes) {
        m_ok = inflateInit2(&m_z, 15 + 32) == Z_OK;
    }
    ~GzipSource() override { inflateEnd(&m_z); }
    GzipSource(const GzipSource&) = delete;
    GzipSource& operator=(const GzipSource&) = delete;

    Result<size_t> read(char* dst, size_t cap) override {
        if (!m_ok) return core::makeError("cannot start zlib");
        m_z.next_out = reinterpret_cast<Bytef*>(dst);
        m_z.avail_out = static_cast<uInt>(std::min(cap, size_t{1} << 30));
        while (m_z.avail_out > 0) {
            if (m_z.avail_in == 0) {
                auto n = m_inner->read(m_in.data(), m_in.size());
                if (!n) return n.error();
                if (*n == 0) {
                    if (m_in_member) return core::makeError("truncated gzip stream (the file ends inside compressed data)");
                    break;
                }
                m_z.next_in = reinterpret_cast<Bytef*>(m_in.data());
                m_z.avail_in = static_cast<uInt>(*n);
            }
            m_in_member = true;
            const int rc = inflate(&m_z, Z_NO_FLUSH);
            if (rc == Z_STREAM_END) {
                m_in_member = false;
                if (inflateReset(&m_z) != Z_OK) return core::makeError("cannot restart zlib");
                continue;
            }
            if (rc == Z_BUF_ERROR) continue;  // needs more input
            if (rc != Z_OK) {
                return core::makeError(fmt::format("corrupt gzip data ({})", m_z.msg ? m_z.msg : "zlib error"));
            }
        }
        return static_cast<size_t>(reinterpret_cast<char*>(m_z.next_out) - dst);
    }

private:
    std::unique_ptr<Source> m_inner;
    std::vector<char> m_in;
    z_stream m_z{};
    bool m_ok = false;
    bool m_in_member = false;
};

struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

// k == lit, as a length check and a memcmp of a constant size: the compiler turns that into a few
// loads, where string_view's operator== was left as a call in the per-field paths.
template <size_t N>
inline bool is(std::string_view k, const char (&lit)[N]) {
    return k.size() == N - 1 && std::memcmp(k.data(), lit, N - 1) == 0;
}

Category parseCategory(std::string_view c) {
    if (is(c, "cpu_op") || is(c, "Operator")) return Category::CpuOp;
    if (is(c, "user_annotation")) return Category::UserAnnotation;
    if (is(c, "gpu_user_annotation")) return Category::GpuUserAnnotation;
    if (is(c, "kernel") || is(c, "Kernel")) return Category::Kernel;
    if (is(c, "gpu_memcpy") || is(c, "Memcpy")) return Category::Memcpy;
    if (is(c, "gpu_memset") || is(c, "Memset")) return Category::Memset;
    if (is(c, "cuda_runtime") || is(c, "Runtime")) return Category::Runtime;
    if (is(c, "cuda_driver")) return Category::Driver;
    if (is(c, "python_function")) return Category::PythonFunction;
    return Category::Other;
}

// Kineto writes times in microseconds with up to three decimals ("ts": 1683231312345.123). Parsed
// from the token to the nanosecond; exponents (never written by Kineto) go through a double.
std::optional<int64_t> parseMicros(std::string_view tok) {
    while (!tok.empty() && (tok.back() == ' ' || tok.back() == '\n' || tok.back() == '\r' || tok.back() == '\t')) {
        tok.remove_suffix(1);
    }
    if (tok.empty() || tok[0] == '-') return std::nullopt;
    constexpr int64_t kMaxMicros = int64_t{9'000'000'000'000'000};  // 9e18 ns fits int64
    int64_t whole = 0;
    size_t i = 0;
    for (; i < tok.size() && tok[i] >= '0' && tok[i] <= '9'; ++i) {
        whole = whole * 10 + (tok[i] - '0');
        if (whole > kMaxMicros) return std::nullopt;
    }
    if (i == 0) return std::nullopt;
    int64_t frac = 0;
    int digits = 0;
    if (i < tok.size() && tok[i] == '.') {
        for (++i; i < tok.size() && tok[i] >= '0' && tok[i] <= '9'; ++i) {
            if (digits < 3) {
                frac = frac * 10 + (tok[i] - '0');
                ++digits;
            }
        }
    }
    if (i != tok.size()) {
        double v = 0;
        try {
            v = std::stod(std::string(tok));
        } catch (...) {
            return std::nullopt;
        }
        if (!(v >= 0) || v > static_cast<double>(kMaxMicros)) return std::nullopt;
        return static_cast<int64_t>(v * 1000.0);
    }
    while (digits < 3) {
        frac *= 10;
        ++digits;
    }
    return whole * 1000 + frac;
}

// --- event fields ----------------------------------------------------------------------------
// The bytes of a JSON string from raw (just past its opening quote) up to its closing quote, when
// none of them is a backslash: then they are its value, with nothing to unescape. nullopt when
// there is a backslash, or no quote before end. Reads up to 15 bytes past end: the caller's
// buffer has simdjson's padding there.
std::optional<std::string_view> unescapedString(const char* raw, const char* end) {
    const char* p = raw;
#if defined(__SSE2__)
    const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\');
    for (; p < end; p += 16) {
        const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
        const auto hits = static_cast<uint32_t>(_mm_movemask_epi8(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash))));
        if (hits == 0) continue;
        const char* hit = p + std::countr_zero(hits);
        if (hit >= end || *hit == '\\') return std::nullopt;
        return std::string_view(raw, static_cast<size_t>(hit - raw));
    }
#else
    for (; p < end; ++p) {
        if (*p == '\\') return std::nullopt;
        if (*p == '"') return std::string_view(raw, static_cast<size_t>(p - raw));
    }
#endif
    return std::nullopt;
}

enum class EventKey : uint8_t { Ph, Name, Cat, Pid, Tid, Ts, Dur, Args, Other };

EventKey eventKey(std::string_view k) {
    switch (k.size()) {
    case 2:
        if (is(k, "ph")) return EventKey::Ph;
        if (is(k, "ts")) return EventKey::Ts;
        break;
    case 3:
        if (is(k, "cat")) return EventKey::Cat;
        if (is(k, "pid")) return EventKey::Pid;
        if (is(k, "tid")) return EventKey::Tid;
        if (is(k, "dur")) return EventKey::Dur;
        break;
    case 4:
        if (is(k, "name")) return EventKey::Name;
        if (is(k, "args")) return EventKey::Args;
        break;
    default:
        break;
    }
    return EventKey::Other;
}

enum class ArgKey : uint8_t {
    Stream, GroupSize, InNelems, OutNelems, TotalAllocated, TotalReserved, Bytes, DeviceType, DeviceId, Correlation, Other
};

ArgKey argKey(std::string_view k) {
    switch (k.size()) {
    case 5:
        if (is(k, "Bytes")) return ArgKey::Bytes;
        break;
    case 6:
        if (is(k, "stream")) return ArgKey::Stream;
        break;
    case 9:
        if (is(k, "Device Id")) return ArgKey::DeviceId;
        break;
    case 10:
        if (is(k, "Group size")) return ArgKey::GroupSize;
        break;
    case 11:
        if (is(k, "Device Type")) return ArgKey::DeviceType;
        if (is(k, "correlation")) return ArgKey::Correlation;
        break;
    case 13:
        if (is(k, "In msg nelems")) return ArgKey::InNelems;
        break;
    case 14:
        if (is(k, "Out msg nelems")) return ArgKey::OutNelems;
        if (is(k, "Total Reserved")) return ArgKey::TotalReserved;
        break;
    case 15:
        if (is(k, "Total Allocated")) return ArgKey::TotalAllocated;
        break;
    default:
        break;
    }
    return ArgKey::Other;
}

// --- the value scanner ---------------------------------------------------------------------
// Where the scan of one JSON value stands: nesting depth, inside a string, after a backslash in
// one, inside a scalar (a number or literal, which ends at the next delimiter).
struct ScanState {
    int depth = 0;
    bool in_string = false, escaped = false, started = false, scalar = false;
};

enum class ScanOutcome : uint8_t {
    Continue,    // the value goes on
    EndsAfter,   // the value ends with this byte
    EndsBefore,  // a scalar ends just before this byte
    TooDeep,
    Unexpected,  // a closing bracket with nothing open
    Backslash,   // scanBlock only: the block has a backslash, scan it byte by byte
};

// One byte of the scan: the reference the block scan must agree with.
inline ScanOutcome scanByte(ScanState& s, char c, int max_depth) {
    if (s.in_string) {
        if (s.escaped) {
            s.escaped = false;
        } else if (c == '\\') {
            s.escaped = true;
        } else if (c == '"') {
            s.in_string = false;
            if (s.depth == 0) return ScanOutcome::EndsAfter;
        }
        return ScanOutcome::Continue;
    }
    if (s.scalar) {
        if (c == ',' || c == ']' || c == '}' || c == ' ' || c == '\n' || c == '\r' || c == '\t') return ScanOutcome::EndsBefore;
        return ScanOutcome::Continue;
    }
    switch (c) {
    case '"':
        s.in_string = true;
        s.started = true;
        break;
    case '{':
    case '[':
        if (++s.depth > max_depth) return ScanOutcome::TooDeep;
        s.started = true;
        break;
    case '}':
    case ']':
        if (s.depth == 0) return ScanOutcome::Unexpected;
        if (--s.depth == 0) return ScanOutcome::EndsAfter;
        break;
    default:
        if (!s.started) s.scalar = true;
        s.started = true;
        break;
    }
    return ScanOutcome::Continue;
}

// Bit i of each mask is set when byte i of a 64-byte block is that character.
struct BlockMasks {
    uint64_t quote = 0, backslash = 0, open = 0, close = 0;  // open: '{' or '['; close: '}' or ']'
};

// Reads 64 bytes at p: the caller guarantees they are readable (the window keeps simdjson's
// padding past its end), and masks off those past the data.
inline BlockMasks classifyBlock(const char* p) {
    BlockMasks m;
#if defined(__SSE2__)
    const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\');
    const __m128i open = _mm_set1_epi8('{'), close = _mm_set1_epi8('}'), bit5 = _mm_set1_epi8(0x20);
    const auto bits = [](__m128i eq, int shift) {
        return static_cast<uint64_t>(static_cast<uint32_t>(_mm_movemask_epi8(eq))) << shift;
    };
    for (int k = 0; k < 4; ++k) {
        const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * k));
        // '[' and ']' differ from '{' and '}' only in bit 5, and no other byte folds onto them.
        const __m128i folded = _mm_or_si128(v, bit5);
        m.quote |= bits(_mm_cmpeq_epi8(v, quote), 16 * k);
        m.backslash |= bits(_mm_cmpeq_epi8(v, backslash), 16 * k);
        m.open |= bits(_mm_cmpeq_epi8(folded, open), 16 * k);
        m.close |= bits(_mm_cmpeq_epi8(folded, close), 16 * k);
    }
#else
    for (int i = 0; i < 64; ++i) {
        const uint64_t bit = uint64_t{1} << i;
        const char c = p[i];
        m.quote |= c == '"' ? bit : 0;
        m.backslash |= c == '\\' ? bit : 0;
        m.open |= (c == '{' || c == '[') ? bit : 0;
        m.close |= (c == '}' || c == ']') ? bit : 0;
    }
#endif
    return m;
}

// Bit i set when an odd number of bits 0..i of x are set. Of the quotes of a block with no
// backslash, that marks each string from its opening quote up to its closing one.
inline uint64_t prefixXor(uint64_t x) {
    x ^= x << 1;
    x ^= x << 2;
    x ^= x << 4;
    x ^= x << 8;
    x ^= x << 16;
    x ^= x << 32;
    return x;
}

struct ScanBlock {
    ScanOutcome outcome = ScanOutcome::Continue;
    size_t at = 0;  // the byte of EndsAfter
};

// The scan of n <= 64 bytes at p inside an object or array (s.depth > 0, not after a backslash),
// equal to scanByte on each: strings are found from the quotes at once, and only the brackets
// outside them are visited. A block with a backslash is left to scanByte (Kineto writes almost none).
inline ScanBlock scanBlock(const char* p, size_t n, ScanState& s, int max_depth) {
    const BlockMasks m = classifyBlock(p);
    const uint64_t valid = n == 64 ? ~uint64_t{0} : (uint64_t{1} << n) - 1;
    if ((m.backslash & valid) != 0) return {ScanOutcome::Backslash};
    const uint64_t inside = prefixXor(m.quote & valid) ^ (s.in_string ? ~uint64_t{0} : 0);
    uint64_t brackets = (m.open | m.close) & valid & ~inside;
    while (brackets != 0) {
        const int at = std::countr_zero(brackets);
        if ((m.open >> at) & 1) {
            if (++s.depth > max_depth) return {ScanOutcome::TooDeep};
        } else if (--s.depth == 0) {
            return {ScanOutcome::EndsAfter, static_cast<size_t>(at)};
        }
        brackets &= brackets - 1;
    }
    // Bits past n repeat bit n-1 of the prefix xor: bit 63 is the state after the block.
    s.in_string = (inside >> 63) != 0;
    return {};
}

class Reader {
public:
    Reader(std::unique_ptr<Source> source, std::string where, const ReadLimits& limits)
        : m_src(std::move(source)), m_where(std::move(where)), m_limits(limits) {
        intern("");  // name 0: an event without a "name" is named "", so every Event::name is valid
    }

    Result<RankTrace> run() {
        if (auto s = parseDocument(); !s) return s.error();
        m_out.names.resize(m_names.size());
        for (auto& [name, id] : m_names) m_out.names[id] = name;
        return std::move(m_out);
    }

private:
    // --- the byte window -------------------------------------------------------------------
    // m_buf[m_begin, m_end) holds unread bytes; the capacity past m_end leaves simdjson's padding.
    bool fill() {
        if (m_eof) return false;
        // Keep only the unread bytes, at the front: positions held across a fill are relative to m_pos.
        if (m_pos > 0) {
            std::memmove(m_buf.data(), m_buf.data() + m_pos, m_end - m_pos);
            m_end -= m_pos;
            m_pos = 0;
        }
        if (m_buf.size() < m_end + kChunkBytes + simdjson::SIMDJSON_PADDING) {
            m_buf.resize(std::max(m_buf.size() * 2, m_end + kChunkBytes + simdjson::SIMDJSON_PADDING));
        }
        auto n = m_src->read(m_buf.data() + m_end, kChunkBytes);
        if (!n) {
            m_error = n.error().message;
            m_eof = true;
            return false;
        }
        if (*n == 0) {
            m_eof = true;
            return false;
        }
        m_end += *n;
        m_out.bytes_read += static_cast<int64_t>(*n);
        if (m_out.bytes_read > m_limits.max_file_bytes) {
            m_error = fmt::format("the JSON is larger than the limit of {} bytes", m_limits.max_file_bytes);
            m_eof = true;
            return false;
        }
        return true;
    }
    core::Error fail(std::string what) const {
        if (!m_error.empty()) return core::makeError(fmt::format("{}: {}", m_where, m_error));
        return core::makeError(fmt::format("{}: {}", m_where, what));
    }
    // Next non-whitespace byte at m_pos (filling as needed); -1 at the end.
    int peek() {
        for (;;) {
            while (m_pos < m_end) {
                const char c = m_buf[m_pos];
                if (c != ' ' && c != '\n' && c != '\r' && c != '\t') return static_cast<unsigned char>(c);
                ++m_pos;
            }
            if (!fill()) return -1;
        }
    }

    // Finds the end of the JSON value starting at m_pos; returns its length, refilling as needed.
    // The value's bytes stay in the buffer at m_pos. `what` names the value in errors; it is only
    // called to build one, so callers pass a lambda and nothing is formatted per value.
    //
    // Inside an object or array the bytes are classified 64 at a time (scanBlock): this is the
    // reader's hottest loop, run over every byte of the file. Scalars, and blocks where a backslash
    // may escape a quote, go through scanByte, the same state machine one byte at a time.
    template <class What>
    Result<size_t> scanValue(int64_t max_bytes, const What& what) {
        size_t i = m_pos;
        ScanState s;
        for (;;) {
            while (i < m_end) {
                const size_t n = std::min<size_t>(64, m_end - i);
                if (s.depth > 0 && !s.escaped) {
                    const ScanBlock b = scanBlock(m_buf.data() + i, n, s, m_limits.max_depth);
                    if (b.outcome == ScanOutcome::TooDeep) {
                        return fail(fmt::format("{}: nesting deeper than {} levels", what(), m_limits.max_depth));
                    }
                    if (b.outcome == ScanOutcome::EndsAfter) return i + b.at + 1 - m_pos;
                    if (b.outcome == ScanOutcome::Continue) {
                        i += n;
                        continue;
                    }
                }
                // The first byte alone: after a '{' or '[' the rest of the block goes to scanBlock.
                for (const size_t stop = i + (s.started ? n : 1); i < stop; ++i) {
                    const char c = m_buf[i];
                    switch (scanByte(s, c, m_limits.max_depth)) {
                    case ScanOutcome::Continue:
                    case ScanOutcome::Backslash:
                        break;
                    case ScanOutcome::EndsAfter:
                        return i + 1 - m_pos;
                    case ScanOutcome::EndsBefore:
                        return i - m_pos;
                    case ScanOutcome::TooDeep:
                        return fail(fmt::format("{}: nesting deeper than {} levels", what(), m_limits.max_depth));
                    case ScanOutcome::Unexpected:
                        return fail(fmt::format("{}: unexpected '{}'", what(), c));
                    }
                }
            }
            if (static_cast<int64_t>(i - m_pos) > max_bytes) {
                return fail(fmt::format("{} is larger than the limit of {} bytes", what(), max_bytes));
            }
            const size_t scanned = i - m_pos;
            const bool more = fill();
            i = m_pos + scanned;
            if (!more) {
                if (s.scalar && m_error.empty()) return i - m_pos;
                return fail(fmt::format("{}: the file ends inside it (truncated JSON)", what()));
            }
        }
    }

    core::Status expect(char c, std::string_view where) {
        const int got = peek();
        if (got != static_cast<unsigned char>(c)) {
            return fail(got < 0 ? fmt::format("{}: expected '{}' but the file ends (truncated JSON)", where, c)
                                : fmt::format("{}: expected '{}' but found '{}'", where, c, static_cast<char>(got)));
        }
        ++m_pos;
        return core::Ok{};
    }

    core::Status parseDocument() {
        const int first = peek();
        if (first == '[') return parseEvents();  // a bare array of events (Chrome's JSON array format)
        if (first != '{') {
            return fail(first < 0 ? "empty file: not a trace (expected a JSON object with traceEvents)"
                                  : "not a Kineto/Chrome trace: expected a JSON object with traceEvents");
        }
        ++m_pos;
        bool seen_events = false;
        for (int n = 0;; ++n) {
            int c = peek();
            if (c == '}' && n == 0) {
                ++m_pos;
                break;
            }
            if (c != '"') return fail(c < 0 ? "the file ends inside the top-level object (truncated JSON)" : "expected a key");
            auto key_len = scanValue(4096, [] { return std::string("a top-level key"); });
            if (!key_len) return key_len.error();
            const std::string key(m_buf.data() + m_pos + 1, *key_len - 2);
            m_pos += *key_len;
            if (auto s = expect(':', key); !s) return s;
            if (key == "traceEvents") {
                if (peek() != '[') return fail("traceEvents is not an array");
                if (auto s = parseEvents(); !s) return s;
                seen_events = true;
            } else {
                if (peek() < 0) return fail(key + ": the file ends (truncated JSON)");
                auto len = scanValue(m_limits.max_top_value_bytes, [&] { return key; });
                if (!len) return len.error();
                if (auto s = topLevelValue(key, std::string_view(m_buf.data() + m_pos, *len)); !s) return s;
                m_pos += *len;
            }
            c = peek();
            if (c == ',') {
                ++m_pos;
                continue;
            }
            if (c == '}') {
                ++m_pos;
                break;
            }
            return fail(c < 0 ? "the file ends inside the top-level object (truncated JSON)"
                              : fmt::format("after {}: expected ',' or '}}'", key));
        }
        if (peek() >= 0) return fail("bytes after the end of the trace object");
        if (!m_error.empty()) return fail("");
        if (!seen_events) return fail("no traceEvents array: not a Kineto/Chrome trace");
        return core::Ok{};
    }

    core::Status topLevelValue(const std::string& key, std::string_view text) {
        if (key != "distributedInfo" && key != "baseTimeNanoseconds" && key != "traceName") return core::Ok{};
        const nlohmann::json j = nlohmann::json::parse(text.begin(), text.end(), nullptr, false);
        if (j.is_discarded()) return fail(key + ": not valid JSON");
        if (key == "baseTimeNanoseconds") {
            if (!j.is_number_integer() || j.get<int64_t>() < 0) return fail("baseTimeNanoseconds must be a non-negative integer");
            m_out.base_time_ns = j.get<int64_t>();
        } else if (key == "traceName") {
            if (j.is_string()) m_out.trace_name = j.get<std::string>();
        } else if (j.is_object()) {
            const auto intField = [&](const char* name, int64_t lo, int64_t hi) -> Result<std::optional<int32_t>> {
                if (!j.contains(name)) return std::optional<int32_t>{};
                const auto& v = j.at(name);
                if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi) {
                    return fail(fmt::format("distributedInfo.{} must be an integer in [{}, {}]", name, lo, hi));
                }
                return std::optional<int32_t>(static_cast<int32_t>(v.get<int64_t>()));
            };
            auto rank = intField("rank", 0, 10'000'000);
            if (!rank) return rank.error();
            auto world = intField("world_size", 1, 10'000'000);
            if (!world) return world.error();
            m_out.rank = *rank;
            m_out.world_size = *world;
            if (m_out.rank && m_out.world_size && *m_out.rank >= *m_out.world_size) {
                return fail(fmt::format("distributedInfo.rank {} is not below world_size {}", *m_out.rank, *m_out.world_size));
            }
            if (j.contains("backend") && j.at("backend").is_string()) m_out.backend = j.at("backend").get<std::string>();
        } else {
            return fail("distributedInfo must be an object");
        }
        return core::Ok{};
    }

    core::Status parseEvents() {
        ++m_pos;  // '['
        if (peek() == ']') {
            ++m_pos;
            return core::Ok{};
        }
        for (;;) {
            const int c = peek();
            if (c < 0) return fail(fmt::format("traceEvents[{}]: the file ends inside the array (truncated JSON)", m_out.events_read));
            const int64_t index = m_out.events_read;
            auto len = scanValue(m_limits.max_event_bytes, [index] { return eventWhat(index); });
            if (!len) return len.error();
            if (m_buf.size() < m_pos + *len + simdjson::SIMDJSON_PADDING) m_buf.resize(m_pos + *len + simdjson::SIMDJSON_PADDING);
            if (auto s = parseEvent(m_buf.data() + m_pos, *len, m_buf.size() - m_pos); !s) return s;
            m_pos += *len;
            const int d = peek();
            if (d == ',') {
                ++m_pos;
                continue;
            }
            if (d == ']') {
                ++m_pos;
                return core::Ok{};
            }
            return fail(d < 0 ? fmt::format("traceEvents: the file ends after event {} (truncated JSON)", m_out.events_read - 1)
                              : fmt::format("traceEvents: expected ',' or ']' after event {}", m_out.events_read - 1));
        }
    }

    static std::string eventWhat(int64_t index) { return fmt::format("traceEvents[{}]", index); }

    uint32_t intern(std::string_view s) {
        // Kineto often writes the same name twice in a row (an op and its kernel launch, a range of
        // cudaLaunchKernel): that one is found without hashing.
        if (m_last_name && s == m_last_name->first) return m_last_name->second;
        auto it = m_names.find(s);
        if (it == m_names.end()) it = m_names.emplace(std::string(s), static_cast<uint32_t>(m_names.size())).first;
        m_last_name = &*it;
        return it->second;
    }

    // A key of the event at [.., end): its raw bytes when it has no escape (no copy, the common
    // case), else simdjson's unescaped copy. False when it has a bad escape.
    static bool keyOf(simdjson::ondemand::field& field, const char* end, std::string_view& key) {
        if (const auto plain = unescapedString(field.key().raw(), end)) {
            key = *plain;
            return true;
        }
        return !field.unescaped_key().get(key);
    }

    // A string value, the same way; false when it is not a string (or a bad one).
    static bool stringOf(simdjson::ondemand::value& v, const char* end, std::string_view& out) {
        const std::string_view tok = v.raw_json_token();
        if (!tok.empty() && tok[0] == '"') {
            if (const auto plain = unescapedString(tok.data() + 1, end)) {
                out = *plain;
                return true;
            }
        }
        return !v.get_string().get(out);
    }

    // An id from a number or a string ("pid": "Spans"): strings map to negative ids of their own.
    template <class What>
    Result<int64_t> idOf(simdjson::ondemand::value& v, const char* end, const What& what, const char* field) {
        simdjson::ondemand::json_type type;
        if (v.type().get(type)) return fail(fmt::format("{}.{}: not valid JSON", what(), field));
        if (type == simdjson::ondemand::json_type::string) {
            std::string_view s;
            if (!stringOf(v, end, s)) return fail(fmt::format("{}.{}: bad string", what(), field));
            auto it = m_string_ids.find(s);
            if (it != m_string_ids.end()) return it->second;
            const int64_t id = -1 - static_cast<int64_t>(m_string_ids.size());
            m_string_ids.emplace(std::string(s), id);
            return id;
        }
        int64_t x = 0;
        if (v.get_int64().get(x)) return fail(fmt::format("{}.{} must be an integer or a string", what(), field));
        return x;
    }

    template <class What>
    Result<int64_t> intArg(simdjson::ondemand::value& v, const What& what, std::string_view key) {
        int64_t x = 0;
        if (!v.get_int64().get(x)) return x;
        double d = 0;
        if (!v.get_double().get(d) && d >= -9.0e18 && d <= 9.0e18 && d == static_cast<double>(static_cast<int64_t>(d))) {
            return static_cast<int64_t>(d);
        }
        return fail(fmt::format("{}.args.\"{}\" must be an integer", what(), key));
    }

    // The args we keep, whatever the event's category: the same keys are read from every event.
    template <class What>
    core::Status parseArgs(simdjson::ondemand::value& v, const char* end, const What& what, Event& e, MemoryEvent& m) {
        simdjson::ondemand::object args;
        if (v.get_object().get(args)) return core::Ok{};  // args of another shape carry nothing we read
        for (auto item : args) {
            // The field and its value are used in place: copies of simdjson's iterators cost more
            // than the rest of the loop. A field with an error has neither key nor value.
            std::string_view ak;
            if (item.error() || !keyOf(item.value_unsafe(), end, ak)) return fail(what() + ".args: bad key");
            simdjson::ondemand::value& av = item.value_unsafe().value();
            const ArgKey k = argKey(ak);
            if (k == ArgKey::Other) continue;
            auto x = intArg(av, what, ak);
            if (!x) return x.error();
            const auto small = static_cast<int32_t>(std::clamp<int64_t>(*x, INT32_MIN, INT32_MAX));
            switch (k) {
            case ArgKey::Stream: e.stream = small; break;
            case ArgKey::GroupSize: e.group_size = small; break;
            case ArgKey::InNelems: e.in_nelems = *x; break;
            case ArgKey::OutNelems: e.out_nelems = *x; break;
            case ArgKey::TotalAllocated: m.total_allocated = *x; break;
            case ArgKey::TotalReserved: m.total_reserved = *x; break;
            case ArgKey::Bytes: m.bytes = *x; break;
            case ArgKey::DeviceType: m.device_type = small; break;
            case ArgKey::DeviceId: m.device_id = small; break;
            case ArgKey::Correlation: e.correlation = std::max<int64_t>(0, *x); break;
            case ArgKey::Other: break;
            }
        }
        return core::Ok{};
    }

    // One element of traceEvents, the len bytes at data (cap readable, for simdjson's padding).
    // Errors name it by its index, formatted only when there is one.
    core::Status parseEvent(const char* data, size_t len, size_t cap) {
        const int64_t index = m_out.events_read++;
        const auto what = [index] { return eventWhat(index); };
        const char* const end = data + len;
        simdjson::ondemand::document doc;
        if (auto err = m_parser.iterate(data, len, cap).get(doc); err) {
            return fail(fmt::format("{}: {}", what(), simdjson::error_message(err)));
        }
        simdjson::ondemand::object obj;
        if (doc.get_object().get(obj)) return fail(what() + ": an event must be a JSON object");
        char ph = 0;
        bool has_ts = false, has_dur = false;
        Event e;
        MemoryEvent m;
        bool is_memory = false;
        for (auto item : obj) {
            std::string_view key;
            if (item.error() || !keyOf(item.value_unsafe(), end, key)) return fail(what() + ": bad key");
            simdjson::ondemand::value& v = item.value_unsafe().value();
            const EventKey k = eventKey(key);
            switch (k) {
            case EventKey::Ph: {
                std::string_view s;
                if (!stringOf(v, end, s) || s.size() != 1) return fail(what() + ".ph must be a one-letter string");
                ph = s[0];
                break;
            }
            case EventKey::Name: {
                std::string_view s;
                if (!stringOf(v, end, s)) return fail(what() + ".name must be a string");
                e.name = intern(s);
                is_memory = is(s, "[memory]");
                break;
            }
            case EventKey::Cat: {
                std::string_view s;
                if (!stringOf(v, end, s)) return fail(what() + ".cat must be a string");
                e.category = parseCategory(s);
                break;
            }
            case EventKey::Pid: {
                auto id = idOf(v, end, what, "pid");
                if (!id) return id.error();
                e.pid = *id;
                break;
            }
            case EventKey::Tid: {
                auto id = idOf(v, end, what, "tid");
                if (!id) return id.error();
                e.tid = *id;
                break;
            }
            case EventKey::Ts:
            case EventKey::Dur: {
                const std::string_view tok = v.raw_json_token();
                const auto ns = parseMicros(tok);
                if (!ns) {
                    return fail(fmt::format("{}.{} must be a non-negative number of microseconds below 9e15 (got {})",
                                            what(), key, std::string(tok.substr(0, 40))));
                }
                if (k == EventKey::Ts) {
                    e.ts_ns = *ns;
                    has_ts = true;
                } else {
                    e.dur_ns = *ns;
                    has_dur = true;
                }
                break;
            }
            case EventKey::Args:
                if (auto s = parseArgs(v, end, what, e, m); !s) return s;
                break;
            case EventKey::Other:
                break;
            }
        }
        if (ph == 'X') {
            if (!has_ts) return fail(what() + ": a complete event (ph X) has no ts");
            if (!has_dur) e.dur_ns = 0;
            if (e.ts_ns > INT64_MAX - e.dur_ns) return fail(what() + ": ts + dur overflows");
            if (static_cast<int64_t>(m_out.events.size()) >= m_limits.max_events) {
                return fail(fmt::format("more than {} events: over the limit", m_limits.max_events));
            }
            ++m_out.per_category[static_cast<size_t>(e.category)];
            m_out.events.push_back(e);
            return core::Ok{};
        }
        if ((ph == 'i' || ph == 'I') && is_memory) {
            if (!has_ts) return fail(what() + ": a [memory] event has no ts");
            if (m.total_allocated < 0 || m.total_reserved < 0) {
                return fail(what() + ": a [memory] event's Total Allocated and Total Reserved must not be negative");
            }
            m.ts_ns = e.ts_ns;
            m_out.memory.push_back(m);
            return core::Ok{};
        }
        ++m_out.events_skipped;
        return core::Ok{};
    }

    std::unique_ptr<Source> m_src;
    std::string m_where;
    ReadLimits m_limits;
    std::vector<char> m_buf;
    size_t m_pos = 0, m_end = 0;
    bool m_eof = false;
    std::string m_error;  // a read error of the source: reported in place of what it caused
    simdjson::ondemand::parser m_parser;
    std::unordered_map<std::string, uint32_t, StringHash, std::equal_to<>> m_names;
    const std::pair<const std::string, uint32_t>* m_last_name = nullptr;  // nodes stay put on rehash
    std::unordered_map<std::string, int64_t, StringHash, std::equal_to<>> m_string_ids;
    RankTrace m_out;
};

bool startsWithGzipMagic(const char* p, size_t n) {
    return n >= 2 && static_cast<unsigned char>(p[0]) == 0x1f && static_cast<unsigned char>(p[1]) == 0x8b;
}

}  // namespace

std::string_view categoryName(Category c) {
    static constexpr std::array<std::string_view, kCategoryCount> kNames = {
        "cpu_op", "user_annotation", "gpu_user_annotation", "kernel", "gpu_memcpy",
        "gpu_memset", "cuda_runtime", "cuda_driver", "python_function", "other"};
    return kNames[static_cast<size_t>(c)];
}

core::Result<RankTrace> readKinetoTrace(const std::filesystem::path& path, const ReadLimits& limits) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) {
        return core::makeError(fmt::format("{}: is a directory, not a trace file", path.string()));
    }
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (f == nullptr) return core::makeError(fmt::format("{}: cannot open: {}", path.string(), std::strerror(errno)));
    char magic[2] = {0, 0};
    const size_t n = std::fread(magic, 1, 2, f);
    std::rewind(f);
    std::unique_ptr<Source> src = std::make_unique<FileSource>(f);
    if (startsWithGzipMagic(magic, n)) src = std::make_unique<GzipSource>(std::move(src));
    Reader reader(std::move(src), path.string(), limits);
    auto out = reader.run();
    if (out) out->path = path;
    return out;
}

core::Result<RankTrace> readKinetoTraceBytes(std::string_view bytes, const std::string& where, const ReadLimits& limits) {
    std::unique_ptr<Source> src = std::make_unique<MemorySource>(bytes);
    if (startsWithGzipMagic(bytes.data(), bytes.size())) src = std::make_unique<GzipSource>(std::move(src));
    Reader reader(std::move(src), where, limits);
    return reader.run();
}

}  // namespace shardcast::trace
