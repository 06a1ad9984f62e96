#include "trace/memory_snapshot.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <fstream>
#include <map>
#include <system_error>

#include <fmt/format.h>

namespace shardcast::trace {
namespace {

// ---------------------------------------------------------------------------------------------
// Value arena. Values are indices, so memo references share a node instead of copying it, and
// nothing is ever freed until the decode ends.

enum class Kind : uint8_t { None, Bool, Int, Float, Str, Bytes, List, Tuple, Dict };

std::string_view kindName(Kind k) {
    switch (k) {
        case Kind::None: return "None";
        case Kind::Bool: return "bool";
        case Kind::Int: return "int";
        case Kind::Float: return "float";
        case Kind::Str: return "str";
        case Kind::Bytes: return "bytes";
        case Kind::List: return "list";
        case Kind::Tuple: return "tuple";
        case Kind::Dict: return "dict";
    }
    return "?";
}

bool isContainer(Kind k) { return k == Kind::List || k == Kind::Tuple || k == Kind::Dict; }

struct Node {
    Kind kind = Kind::None;
    // Set when a memo-fetched value was ever put into this container or one of its children; only
    // then can appending it somewhere close a cycle, so only then is the cycle check paid for.
    bool shared = false;
    uint16_t height = 0;  // containers nested below, as known when children were added
    int64_t i = 0;
    double f = 0;
    std::string_view s;           // points into the input, which outlives the arena
    std::vector<uint32_t> items;  // list/tuple: values; dict: key, value, key, value, ...
};

struct Slot {
    uint32_t node = 0;
    bool via_memo = false;  // this stack entry is a second reference (BINGET, DUP)
};

constexpr uint32_t kUnset = 0xFFFFFFFFu;

// Opcode names, for refusals and for bytes that are not opcodes of protocols 2-5 at all.
std::string_view opcodeName(uint8_t op) {
    switch (op) {
        case 'c': return "GLOBAL";
        case 0x93: return "STACK_GLOBAL";
        case 'R': return "REDUCE";
        case 'b': return "BUILD";
        case 'i': return "INST";
        case 'o': return "OBJ";
        case 0x81: return "NEWOBJ";
        case 0x92: return "NEWOBJ_EX";
        case 'P': return "PERSID";
        case 'Q': return "BINPERSID";
        case 0x82: return "EXT1";
        case 0x83: return "EXT2";
        case 0x84: return "EXT4";
        case 0x8b: return "LONG4";
        case 0x8e: return "BINBYTES8";
        case 0x8f: return "EMPTY_SET";
        case 0x90: return "ADDITEMS";
        case 0x91: return "FROZENSET";
        case 0x96: return "BYTEARRAY8";
        case 0x97: return "NEXT_BUFFER";
        case 0x98: return "READONLY_BUFFER";
        case 'S': return "STRING";
        case 'T': return "BINSTRING";
        case 'U': return "SHORT_BINSTRING";
        case 'V': return "UNICODE";
        case 'I': return "INT";
        case 'L': return "LONG";
        case 'F': return "FLOAT";
        case 'g': return "GET";
        case 'p': return "PUT";
        default: return {};
    }
}

bool executesCode(uint8_t op) {
    switch (op) {
        case 'c': case 0x93: case 'R': case 'b': case 'i': case 'o': case 0x81: case 0x92:
        case 'P': case 'Q': case 0x82: case 0x83: case 0x84:
            return true;
        default:
            return false;
    }
}

class Decoder {
public:
    Decoder(std::string_view data, std::string_view where, const SnapshotLimits& limits)
        : m_data(data), m_where(where), m_limits(limits) {}

    core::Result<uint32_t> run();
    const std::vector<Node>& nodes() const { return m_nodes; }

private:
    core::Error fail(size_t at, std::string_view what) const {
        return core::makeError(fmt::format("{}: byte {}: {}", m_where, at, what));
    }
    size_t remaining() const { return m_data.size() - m_pos; }
    uint64_t readLe(size_t n) {
        uint64_t v = 0;
        for (size_t k = 0; k < n; ++k) v |= uint64_t(uint8_t(m_data[m_pos + k])) << (8 * k);
        m_pos += n;
        return v;
    }
    size_t base() const { return m_marks.empty() ? 0 : m_marks.back(); }
    size_t avail() const { return m_stack.size() - base(); }

    core::Result<uint32_t> newNode(size_t at, Kind kind);
    core::Status push(size_t at, Slot s);
    core::Status addChild(size_t at, uint32_t parent, Slot child);
    core::Result<bool> reaches(size_t at, uint32_t from, uint32_t target);
    core::Status memoSet(size_t at, uint64_t index);
    core::Status collect(size_t at, std::string_view op, Kind kind);  // TUPLE, LIST, DICT
    core::Status step(size_t at, uint8_t op, bool& done);

    std::string_view m_data;
    std::string_view m_where;
    SnapshotLimits m_limits;
    size_t m_pos = 0;
    std::vector<Node> m_nodes;
    std::vector<Slot> m_stack;
    std::vector<size_t> m_marks;
    std::vector<uint32_t> m_memo;
    int64_t m_memo_count = 0;
    std::vector<uint32_t> m_seen;  // cycle-check epoch per node
    uint32_t m_epoch = 0;
    int64_t m_check_work = 0;
};

core::Result<uint32_t> Decoder::newNode(size_t at, Kind kind) {
    if (int64_t(m_nodes.size()) >= m_limits.max_nodes)
        return fail(at, fmt::format("more than {} values; the limit is max_nodes", m_limits.max_nodes));
    m_nodes.push_back(Node{});
    m_nodes.back().kind = kind;
    return uint32_t(m_nodes.size() - 1);
}

core::Status Decoder::push(size_t at, Slot s) {
    if (int64_t(m_stack.size()) >= m_limits.max_stack)
        return fail(at, fmt::format("more than {} values on the pickle stack; the limit is max_stack",
                                    m_limits.max_stack));
    m_stack.push_back(s);
    return core::Ok{};
}

// Whether `target` is reachable from `from`: then putting `from` into `target` closes a cycle.
// Iterative, with a per-call epoch so shared subtrees are walked once, and a total budget so a
// file made of many references to one big container cannot make the checks quadratic.
core::Result<bool> Decoder::reaches(size_t at, uint32_t from, uint32_t target) {
    if (from == target) return true;
    m_seen.resize(m_nodes.size(), 0);
    if (++m_epoch == 0) {
        std::fill(m_seen.begin(), m_seen.end(), 0);
        m_epoch = 1;
    }
    std::vector<uint32_t> todo{from};
    m_seen[from] = m_epoch;
    const int64_t budget = 16 * m_limits.max_nodes + (int64_t{1} << 20);
    while (!todo.empty()) {
        const uint32_t n = todo.back();
        todo.pop_back();
        for (uint32_t c : m_nodes[n].items) {
            if (++m_check_work > budget)
                return fail(at, "shared references make the cycle checks exceed their budget "
                                "(16 x max_nodes); not a snapshot torch writes");
            if (c == target) return true;
            if (!isContainer(m_nodes[c].kind) || m_seen[c] == m_epoch) continue;
            m_seen[c] = m_epoch;
            todo.push_back(c);
        }
    }
    return false;
}

core::Status Decoder::addChild(size_t at, uint32_t parent, Slot child) {
    const Node& c = m_nodes[child.node];
    if (isContainer(c.kind)) {
        const bool check = child.via_memo || c.shared;
        if (check) {
            auto r = reaches(at, child.node, parent);
            if (!r) return r.error();
            if (*r)
                return fail(at, fmt::format("a {} would contain itself (a cycle through the memo); a "
                                            "memory snapshot is a tree of plain data",
                                            kindName(m_nodes[parent].kind)));
        }
        const int height = c.height + 1;
        Node& p = m_nodes[parent];
        p.shared = p.shared || check;
        if (height > p.height) p.height = uint16_t(std::min(height, 0xFFFF));
        if (p.height > m_limits.max_depth)
            return fail(at, fmt::format("values nested more than {} deep; the limit is max_depth",
                                        m_limits.max_depth));
    }
    m_nodes[parent].items.push_back(child.node);
    return core::Ok{};
}

core::Status Decoder::memoSet(size_t at, uint64_t index) {
    if (m_stack.empty()) return fail(at, "memo store with an empty stack");
    if (index >= uint64_t(m_limits.max_nodes))
        return fail(at, fmt::format("memo index {} beyond max_nodes ({})", index, m_limits.max_nodes));
    if (index >= m_memo.size()) m_memo.resize(size_t(index) + 1, kUnset);
    if (m_memo[size_t(index)] == kUnset) ++m_memo_count;
    m_memo[size_t(index)] = m_stack.back().node;
    return core::Ok{};
}

core::Status Decoder::collect(size_t at, std::string_view op, Kind kind) {
    if (m_marks.empty()) return fail(at, fmt::format("{} without a MARK", op));
    const size_t mark = m_marks.back();
    m_marks.pop_back();
    if (kind == Kind::Dict && (m_stack.size() - mark) % 2 != 0)
        return fail(at, "DICT with an odd number of keys and values");
    auto n = newNode(at, kind);
    if (!n) return n.error();
    for (size_t k = mark; k < m_stack.size(); ++k) {
        if (kind == Kind::Dict && (k - mark) % 2 == 0) {
            const Kind kk = m_nodes[m_stack[k].node].kind;
            if (kk != Kind::Str && kk != Kind::Int)
                return fail(at, fmt::format("a dict key is a {}; expected str or int", kindName(kk)));
        }
        auto st = addChild(at, *n, m_stack[k]);
        if (!st) return st.error();
    }
    m_stack.resize(mark);
    return push(at, Slot{*n, false});
}

core::Status Decoder::step(size_t at, uint8_t op, bool& done) {
    auto need = [&](size_t n) -> core::Status {
        if (remaining() < n)
            return fail(at, fmt::format("opcode 0x{:02x} needs {} more bytes but the file ends after {} "
                                        "(truncated?)", op, n, remaining()));
        return core::Ok{};
    };
    auto pushNew = [&](Kind kind) -> core::Result<uint32_t> {
        auto n = newNode(at, kind);
        if (!n) return n;
        auto st = push(at, Slot{*n, false});
        if (!st) return st.error();
        return n;
    };
    auto pushEmpty = [&](Kind kind) -> core::Status {
        auto n = pushNew(kind);
        if (!n) return n.error();
        return core::Ok{};
    };
    auto pushInt = [&](int64_t v) -> core::Status {
        auto n = pushNew(Kind::Int);
        if (!n) return n.error();
        m_nodes[*n].i = v;
        return core::Ok{};
    };
    auto pushText = [&](Kind kind, size_t width) -> core::Status {
        if (auto st = need(width); !st) return st;
        const uint64_t len = readLe(width);
        if (len > uint64_t(m_limits.max_string_bytes))
            return fail(at, fmt::format("a {} of {} bytes; the limit is max_string_bytes ({})",
                                        kindName(kind), len, m_limits.max_string_bytes));
        if (len > remaining())
            return fail(at, fmt::format("a {} of {} bytes but only {} bytes remain (truncated?)",
                                        kindName(kind), len, remaining()));
        auto n = pushNew(kind);
        if (!n) return n.error();
        m_nodes[*n].s = m_data.substr(m_pos, size_t(len));
        m_pos += size_t(len);
        return core::Ok{};
    };
    auto memoGet = [&](uint64_t index) -> core::Status {
        if (index >= m_memo.size() || m_memo[size_t(index)] == kUnset)
            return fail(at, fmt::format("memo reference {} was never stored ({} entries stored)", index,
                                        m_memo_count));
        return push(at, Slot{m_memo[size_t(index)], true});
    };
    auto target = [&](size_t index, Kind kind, std::string_view name) -> core::Result<uint32_t> {
        const uint32_t t = m_stack[index].node;
        if (m_nodes[t].kind != kind)
            return fail(at, fmt::format("{} into a {}; expected a {}", name, kindName(m_nodes[t].kind),
                                        kindName(kind)));
        return t;
    };

    switch (op) {
        case 0x80: {  // PROTO
            if (auto st = need(1); !st) return st;
            const int v = uint8_t(m_data[m_pos++]);
            if (v < 2 || v > 5)
                return fail(at, fmt::format("pickle protocol {}; expected 2 to 5", v));
            return core::Ok{};
        }
        case 0x95: {  // FRAME: only a read-ahead hint; checked, then ignored
            if (auto st = need(8); !st) return st;
            const uint64_t len = readLe(8);
            if (len > remaining())
                return fail(at, fmt::format("FRAME of {} bytes but only {} remain (truncated?)", len,
                                            remaining()));
            return core::Ok{};
        }
        case '.':  // STOP
            if (!m_marks.empty() || m_stack.size() != 1)
                return fail(at, fmt::format("STOP with {} values and {} marks on the stack; expected one "
                                            "value", m_stack.size(), m_marks.size()));
            done = true;
            return core::Ok{};
        case '(':  // MARK
            if (int64_t(m_marks.size()) >= m_limits.max_depth)
                return fail(at, fmt::format("more than {} open MARKs; the limit is max_depth",
                                            m_limits.max_depth));
            m_marks.push_back(m_stack.size());
            return core::Ok{};
        case '0':  // POP: pops a value, or the mark when none is above it (as pickle.py does)
            if (avail() > 0) {
                m_stack.pop_back();
            } else if (!m_marks.empty()) {
                m_marks.pop_back();
            } else {
                return fail(at, "POP from an empty stack");
            }
            return core::Ok{};
        case '1':  // POP_MARK
            if (m_marks.empty()) return fail(at, "POP_MARK without a MARK");
            m_stack.resize(m_marks.back());
            m_marks.pop_back();
            return core::Ok{};
        case '2': {  // DUP: both entries now refer to one node
            if (avail() == 0) return fail(at, "DUP of an empty stack");
            m_stack.back().via_memo = true;
            return push(at, m_stack.back());
        }
        case 'N': return pushEmpty(Kind::None);
        case 0x88:
        case 0x89: {  // NEWTRUE, NEWFALSE
            auto n = pushNew(Kind::Bool);
            if (!n) return n.error();
            m_nodes[*n].i = op == 0x88 ? 1 : 0;
            return core::Ok{};
        }
        case 'J': {  // BININT: signed 32-bit
            if (auto st = need(4); !st) return st;
            return pushInt(int64_t(int32_t(uint32_t(readLe(4)))));
        }
        case 'K':
            if (auto st = need(1); !st) return st;
            return pushInt(int64_t(readLe(1)));
        case 'M':
            if (auto st = need(2); !st) return st;
            return pushInt(int64_t(readLe(2)));
        case 0x8a: {  // LONG1: little-endian two's complement, up to 8 bytes here
            if (auto st = need(1); !st) return st;
            const size_t n = size_t(readLe(1));
            if (n > 8)
                return fail(at, fmt::format("LONG1 of {} bytes; integers beyond 64 bits are not valid in a "
                                            "memory snapshot (at most 8)", n));
            if (auto st = need(n); !st) return st;
            uint64_t v = readLe(n);
            if (n > 0 && n < 8 && (v >> (8 * n - 1)) & 1) v |= ~uint64_t{0} << (8 * n);  // sign-extend
            return pushInt(int64_t(v));
        }
        case 'G': {  // BINFLOAT: big-endian IEEE double
            if (auto st = need(8); !st) return st;
            uint64_t bits = 0;
            for (int k = 0; k < 8; ++k) bits = (bits << 8) | uint8_t(m_data[m_pos + size_t(k)]);
            m_pos += 8;
            auto n = pushNew(Kind::Float);
            if (!n) return n.error();
            m_nodes[*n].f = std::bit_cast<double>(bits);
            return core::Ok{};
        }
        case 0x8c: return pushText(Kind::Str, 1);    // SHORT_BINUNICODE
        case 'X': return pushText(Kind::Str, 4);     // BINUNICODE
        case 0x8d: return pushText(Kind::Str, 8);    // BINUNICODE8
        case 'C': return pushText(Kind::Bytes, 1);   // SHORT_BINBYTES
        case 'B': return pushText(Kind::Bytes, 4);   // BINBYTES
        case 0x8e: return pushText(Kind::Bytes, 8);  // BINBYTES8
        case '}': return pushEmpty(Kind::Dict);
        case ']': return pushEmpty(Kind::List);
        case ')': return pushEmpty(Kind::Tuple);
        case 't': return collect(at, "TUPLE", Kind::Tuple);
        case 'l': return collect(at, "LIST", Kind::List);
        case 'd': return collect(at, "DICT", Kind::Dict);
        case 0x85:
        case 0x86:
        case 0x87: {  // TUPLE1..3
            const size_t k = size_t(op - 0x84);
            if (avail() < k) return fail(at, fmt::format("TUPLE{} with {} values on the stack", k, avail()));
            auto n = newNode(at, Kind::Tuple);
            if (!n) return n.error();
            for (size_t j = m_stack.size() - k; j < m_stack.size(); ++j) {
                auto st = addChild(at, *n, m_stack[j]);
                if (!st) return st;
            }
            m_stack.resize(m_stack.size() - k);
            return push(at, Slot{*n, false});
        }
        case 'a': {  // APPEND
            if (avail() < 2) return fail(at, "APPEND needs a list and a value on the stack");
            auto t = target(m_stack.size() - 2, Kind::List, "APPEND");
            if (!t) return t.error();
            const Slot v = m_stack.back();
            m_stack.pop_back();
            return addChild(at, *t, v);
        }
        case 'e':     // APPENDS
        case 'u': {   // SETITEMS
            const bool dict = op == 'u';
            const std::string_view name = dict ? "SETITEMS" : "APPENDS";
            if (m_marks.empty()) return fail(at, fmt::format("{} without a MARK", name));
            const size_t mark = m_marks.back();
            m_marks.pop_back();
            if (mark == base() || mark == 0)
                return fail(at, fmt::format("{} with no {} below its MARK", name, dict ? "dict" : "list"));
            auto t = target(mark - 1, dict ? Kind::Dict : Kind::List, name);
            if (!t) return t.error();
            if (dict && (m_stack.size() - mark) % 2 != 0)
                return fail(at, "SETITEMS with an odd number of keys and values");
            for (size_t k = mark; k < m_stack.size(); ++k) {
                if (dict && (k - mark) % 2 == 0) {
                    const Kind kk = m_nodes[m_stack[k].node].kind;
                    if (kk != Kind::Str && kk != Kind::Int)
                        return fail(at, fmt::format("a dict key is a {}; expected str or int", kindName(kk)));
                }
                auto st = addChild(at, *t, m_stack[k]);
                if (!st) return st;
            }
            m_stack.resize(mark);
            return core::Ok{};
        }
        case 's': {  // SETITEM
            if (avail() < 3) return fail(at, "SETITEM needs a dict, a key and a value on the stack");
            auto t = target(m_stack.size() - 3, Kind::Dict, "SETITEM");
            if (!t) return t.error();
            const Kind kk = m_nodes[m_stack[m_stack.size() - 2].node].kind;
            if (kk != Kind::Str && kk != Kind::Int)
                return fail(at, fmt::format("a dict key is a {}; expected str or int", kindName(kk)));
            for (size_t k = m_stack.size() - 2; k < m_stack.size(); ++k) {
                auto st = addChild(at, *t, m_stack[k]);
                if (!st) return st;
            }
            m_stack.resize(m_stack.size() - 2);
            return core::Ok{};
        }
        case 0x94: return memoSet(at, uint64_t(m_memo_count));  // MEMOIZE
        case 'q':
            if (auto st = need(1); !st) return st;
            return memoSet(at, readLe(1));
        case 'r':
            if (auto st = need(4); !st) return st;
            return memoSet(at, readLe(4));
        case 'h':
            if (auto st = need(1); !st) return st;
            return memoGet(readLe(1));
        case 'j':
            if (auto st = need(4); !st) return st;
            return memoGet(readLe(4));
        default:
            break;
    }
    const std::string_view name = opcodeName(op);
    if (executesCode(op))
        return fail(at, fmt::format("opcode {} (0x{:02x}) is refused: it imports or calls an object, and "
                                    "a memory snapshot holds only plain data (dicts, lists, str, int, "
                                    "float)", name, op));
    if (!name.empty())
        return fail(at, fmt::format("opcode {} (0x{:02x}) is not used by memory snapshots; expected plain "
                                    "data pickled with protocol 2 to 5", name, op));
    return fail(at, fmt::format("byte 0x{:02x} is not a pickle opcode (corrupt file?)", op));
}

core::Result<uint32_t> Decoder::run() {
    if (m_data.empty()) return fail(0, "empty file; expected a pickle (protocol 2 to 5)");
    if (uint8_t(m_data[0]) != 0x80)
        return fail(0, "does not start with the PROTO opcode (0x80); expected a pickle written with "
                       "protocol 2 to 5, as torch.cuda.memory._dump_snapshot writes");
    bool done = false;
    while (!done) {
        if (m_pos >= m_data.size()) return fail(m_pos, "the file ends before STOP (truncated?)");
        const size_t at = m_pos;
        const uint8_t op = uint8_t(m_data[m_pos++]);
        auto st = step(at, op, done);
        if (!st) return st.error();
    }
    return m_stack.back().node;
}

// ---------------------------------------------------------------------------------------------
// Summary: walks the known shape only (no generic traversal), with a work budget so a file with
// many references to one big container cannot make it quadratic.

class Summarizer {
public:
    Summarizer(const std::vector<Node>& nodes, std::string_view where, const SnapshotLimits& limits)
        : m_nodes(nodes), m_where(where), m_budget(4 * limits.max_nodes + (int64_t{1} << 20)) {}
    core::Result<MemorySnapshot> run(uint32_t root);

private:
    core::Error fail(std::string_view what) const {
        return core::makeError(fmt::format("{}: {}", m_where, what));
    }
    core::Status spend(size_t n) {
        m_work += int64_t(n);
        if (m_work > m_budget)
            return fail("shared references make the snapshot too expensive to walk (4 x max_nodes); not "
                        "a snapshot torch writes");
        return core::Ok{};
    }
    const Node* get(const Node& dict, std::string_view key) {
        // The last duplicate wins, as in a Python dict built by SETITEMS.
        for (size_t k = dict.items.size(); k >= 2; k -= 2) {
            const Node& kn = m_nodes[dict.items[k - 2]];
            if (kn.kind == Kind::Str && kn.s == key) return &m_nodes[dict.items[k - 1]];
        }
        return nullptr;
    }
    core::Result<const Node*> need(const Node& dict, std::string_view key, Kind kind, std::string_view in) {
        if (auto st = spend(dict.items.size()); !st) return st.error();
        const Node* v = get(dict, key);
        if (!v) return fail(fmt::format("{} has no \"{}\"; a torch memory snapshot has it", in, key));
        const bool ok = v->kind == kind || (kind == Kind::Int && v->kind == Kind::Bool);
        if (!ok)
            return fail(fmt::format("{} \"{}\" is a {}; expected a {}", in, key, kindName(v->kind),
                                    kindName(kind)));
        return v;
    }
    core::Result<int64_t> size(const Node& dict, std::string_view key, std::string_view in) {
        auto v = need(dict, key, Kind::Int, in);
        if (!v) return v.error();
        if ((*v)->i < 0)
            return fail(fmt::format("{} \"{}\" is {}; expected a size >= 0", in, key, (*v)->i));
        return (*v)->i;
    }
    core::Status add(int64_t& acc, int64_t v, std::string_view what) {
        if (__builtin_add_overflow(acc, v, &acc))
            return fail(fmt::format("{} overflows 64 bits; not a real snapshot", what));
        return core::Ok{};
    }
    DeviceMemory& dev(int64_t d) {
        auto [it, fresh] = m_devices.try_emplace(d);
        if (fresh) it->second.device = d;
        return it->second;
    }
    core::Status segments(const Node& list);
    core::Status traceOf(int64_t d, const Node& list);
    core::Status curves(DeviceMemory& m, const std::vector<int64_t>& da, const std::vector<int64_t>& dr);

    const std::vector<Node>& m_nodes;
    std::string_view m_where;
    int64_t m_budget;
    int64_t m_work = 0;
    std::map<int64_t, DeviceMemory> m_devices;
};

constexpr int64_t kMaxDevice = 1 << 16;

core::Status Summarizer::segments(const Node& list) {
    for (size_t si = 0; si < list.items.size(); ++si) {
        const Node& seg = m_nodes[list.items[si]];
        const std::string in = fmt::format("segments[{}]", si);
        if (seg.kind != Kind::Dict) return fail(fmt::format("{} is a {}; expected a dict", in, kindName(seg.kind)));
        auto device = need(seg, "device", Kind::Int, in);
        if (!device) return device.error();
        const int64_t d = (*device)->i;
        if (d < 0 || d >= kMaxDevice)
            return fail(fmt::format("{} \"device\" is {}; expected 0 to {}", in, d, kMaxDevice - 1));
        auto total = size(seg, "total_size", in);
        if (!total) return total.error();
        auto blocks = need(seg, "blocks", Kind::List, in);
        if (!blocks) return blocks.error();
        DeviceMemory& m = dev(d);
        ++m.segments;
        if (auto st = add(m.reserved_bytes, *total, "reserved bytes"); !st) return st;
        if (const Node* t = get(seg, "segment_type"); t && t->kind == Kind::Str && t->s == "large")
            ++m.large_segments;
        if (auto st = spend((*blocks)->items.size()); !st) return st;
        for (size_t bi = 0; bi < (*blocks)->items.size(); ++bi) {
            const Node& b = m_nodes[(*blocks)->items[bi]];
            const std::string bin = fmt::format("{}.blocks[{}]", in, bi);
            if (b.kind != Kind::Dict) return fail(fmt::format("{} is a {}; expected a dict", bin, kindName(b.kind)));
            auto bsize = size(b, "size", bin);
            if (!bsize) return bsize.error();
            auto state = need(b, "state", Kind::Str, bin);
            if (!state) return state.error();
            ++m.blocks;
            const std::string_view s = (*state)->s;
            if (s == "active_allocated") {
                if (auto st = add(m.allocated_bytes, *bsize, "allocated bytes"); !st) return st;
                int64_t requested = *bsize;
                if (const Node* r = get(b, "requested_size"); r && r->kind == Kind::Int && r->i >= 0)
                    requested = r->i;
                if (auto st = add(m.requested_bytes, requested, "requested bytes"); !st) return st;
            } else if (s == "active_pending_free") {
                if (auto st = add(m.pending_free_bytes, *bsize, "pending-free bytes"); !st) return st;
            } else if (s == "inactive") {
                m.largest_free_block = std::max(m.largest_free_block, *bsize);
            } else {
                return fail(fmt::format("{} \"state\" is \"{}\"; expected active_allocated, "
                                        "active_pending_free or inactive", bin, s));
            }
        }
    }
    return core::Ok{};
}

TraceAction actionOf(std::string_view s) {
    if (s == "alloc") return TraceAction::Alloc;
    if (s == "free_requested") return TraceAction::FreeRequested;
    if (s == "free_completed") return TraceAction::FreeCompleted;
    if (s == "segment_alloc") return TraceAction::SegmentAlloc;
    if (s == "segment_free") return TraceAction::SegmentFree;
    if (s == "segment_map") return TraceAction::SegmentMap;
    if (s == "segment_unmap") return TraceAction::SegmentUnmap;
    if (s == "snapshot") return TraceAction::Snapshot;
    if (s == "oom") return TraceAction::Oom;
    return TraceAction::Unknown;
}

core::Status Summarizer::traceOf(int64_t d, const Node& list) {
    DeviceMemory& m = dev(d);
    m.events = int64_t(list.items.size());
    std::vector<int64_t> da(list.items.size(), 0);  // change of active bytes per event
    std::vector<int64_t> dr(list.items.size(), 0);  // change of reserved bytes per event
    for (size_t ei = 0; ei < list.items.size(); ++ei) {
        const Node& e = m_nodes[list.items[ei]];
        const std::string in = fmt::format("device_traces[{}][{}]", d, ei);
        if (e.kind != Kind::Dict) return fail(fmt::format("{} is a {}; expected a dict", in, kindName(e.kind)));
        auto action = need(e, "action", Kind::Str, in);
        if (!action) return action.error();
        const TraceAction a = actionOf((*action)->s);
        ++m.action_counts[size_t(a)];
        if (a == TraceAction::Unknown || a == TraceAction::Snapshot || a == TraceAction::FreeRequested)
            continue;
        auto sz = size(e, "size", in);
        if (!sz) return sz.error();
        switch (a) {
            case TraceAction::Alloc: da[ei] = *sz; break;
            case TraceAction::FreeCompleted: da[ei] = -*sz; break;
            case TraceAction::SegmentAlloc:
            case TraceAction::SegmentMap: dr[ei] = *sz; break;
            case TraceAction::SegmentFree:
            case TraceAction::SegmentUnmap: dr[ei] = -*sz; break;
            case TraceAction::Oom:
                m.oom = true;
                m.oom_requested_bytes = *sz;
                break;
            default: break;
        }
    }
    return curves(m, da, dr);
}

core::Status Summarizer::curves(DeviceMemory& m, const std::vector<int64_t>& da, const std::vector<int64_t>& dr) {
    // Backwards: the trace may begin mid-run (it is a ring buffer of max_entries), so the state
    // before its first event is the final state less everything the trace did.
    int64_t net_a = 0;
    int64_t net_r = 0;
    for (size_t k = 0; k < da.size(); ++k) {
        if (auto st = add(net_a, da[k], "the trace's net allocation"); !st) return st;
        if (auto st = add(net_r, dr[k], "the trace's net reservation"); !st) return st;
    }
    int64_t final_active = m.allocated_bytes;
    if (auto st = add(final_active, m.pending_free_bytes, "active bytes"); !st) return st;
    if (__builtin_sub_overflow(final_active, net_a, &m.initial_active) ||
        __builtin_sub_overflow(m.reserved_bytes, net_r, &m.initial_reserved))
        return fail("the trace's sizes overflow 64 bits; not a real snapshot");
    m.trace_consistent = m.initial_active >= 0 && m.initial_reserved >= 0;

    m.active_curve.assign(da.size() + 1, 0);
    m.reserved_curve.assign(da.size() + 1, 0);
    int64_t a = m.initial_active;
    int64_t r = m.initial_reserved;
    for (size_t p = 0; p <= da.size(); ++p) {
        if (p > 0) {
            a += da[p - 1];  // cannot overflow: every partial sum lies between values checked above
            r += dr[p - 1];
        }
        m.active_curve[p] = a;
        m.reserved_curve[p] = r;
        if (p == 0 || a > m.peak_active) {
            m.peak_active = a;
            m.peak_active_point = int64_t(p);
        }
        if (p == 0 || r > m.peak_reserved) {
            m.peak_reserved = r;
            m.peak_reserved_point = int64_t(p);
            m.fragmentation_at_reserved_peak = r - a;
        }
        if (p == 0 || r - a > m.max_fragmentation) {
            m.max_fragmentation = r - a;
            m.max_fragmentation_point = int64_t(p);
        }
    }
    return core::Ok{};
}

core::Result<MemorySnapshot> Summarizer::run(uint32_t root) {
    const Node& top = m_nodes[root];
    if (top.kind != Kind::Dict)
        return fail(fmt::format("the pickled value is a {}; expected the dict torch.cuda.memory._snapshot() "
                                "returns", kindName(top.kind)));
    auto segs = need(top, "segments", Kind::List, "the snapshot");
    if (!segs) return segs.error();
    if (auto st = segments(**segs); !st) return st.error();

    // device_traces is absent only in snapshots older than _record_memory_history's trace.
    if (const Node* traces = get(top, "device_traces")) {
        if (traces->kind != Kind::List)
            return fail(fmt::format("the snapshot's \"device_traces\" is a {}; expected a list per device",
                                    kindName(traces->kind)));
        if (int64_t(traces->items.size()) > kMaxDevice)
            return fail(fmt::format("\"device_traces\" lists {} devices; at most {}", traces->items.size(),
                                    kMaxDevice));
        for (size_t d = 0; d < traces->items.size(); ++d) {
            const Node& list = m_nodes[traces->items[d]];
            if (list.kind != Kind::List)
                return fail(fmt::format("device_traces[{}] is a {}; expected a list of events", d,
                                        kindName(list.kind)));
            if (list.items.empty() && !m_devices.count(int64_t(d))) continue;
            if (auto st = spend(list.items.size()); !st) return st.error();
            if (auto st = traceOf(int64_t(d), list); !st) return st.error();
        }
    }
    MemorySnapshot out;
    for (auto& [d, m] : m_devices) {
        if (m.active_curve.empty()) {
            if (auto st = curves(m, {}, {}); !st) return st.error();
        }
        out.oom = out.oom || m.oom;
        out.devices.push_back(std::move(m));
    }
    out.values = int64_t(m_nodes.size());
    if (const Node* settings = get(top, "allocator_settings"); settings && settings->kind == Kind::Dict) {
        if (const Node* conf = get(*settings, "PYTORCH_CUDA_ALLOC_CONF"); conf && conf->kind == Kind::Str)
            out.allocator_conf = std::string(conf->s);
        if (const Node* exp = get(*settings, "expandable_segments"); exp && exp->kind == Kind::Bool)
            out.expandable_segments = exp->i != 0;
    }
    return out;
}

}  // namespace

std::string_view traceActionName(TraceAction a) {
    switch (a) {
        case TraceAction::Alloc: return "alloc";
        case TraceAction::FreeRequested: return "free_requested";
        case TraceAction::FreeCompleted: return "free_completed";
        case TraceAction::SegmentAlloc: return "segment_alloc";
        case TraceAction::SegmentFree: return "segment_free";
        case TraceAction::SegmentMap: return "segment_map";
        case TraceAction::SegmentUnmap: return "segment_unmap";
        case TraceAction::Snapshot: return "snapshot";
        case TraceAction::Oom: return "oom";
        case TraceAction::Unknown: return "unknown";
    }
    return "unknown";
}

const DeviceMemory* MemorySnapshot::device(int64_t d) const {
    for (const DeviceMemory& m : devices)
        if (m.device == d) return &m;
    return nullptr;
}

core::Result<MemorySnapshot> readMemorySnapshotBytes(std::string_view bytes, std::string_view where,
                                                     const SnapshotLimits& limits) {
    if (int64_t(bytes.size()) > limits.max_file_bytes)
        return core::makeError(fmt::format("{}: {} bytes; the limit is max_file_bytes ({})", where, bytes.size(),
                                           limits.max_file_bytes));
    Decoder decoder(bytes, where, limits);
    auto root = decoder.run();
    if (!root) return root.error();
    return Summarizer(decoder.nodes(), where, limits).run(*root);
}

core::Result<MemorySnapshot> readMemorySnapshot(const std::filesystem::path& path, const SnapshotLimits& limits) {
    const std::string where = path.string();
    std::error_code ec;
    const auto size = std::filesystem::file_size(path, ec);
    if (ec)
        return core::makeError(fmt::format("{}: cannot read: {}; expected a file written by "
                                           "torch.cuda.memory._dump_snapshot", where, ec.message()));
    if (int64_t(size) > limits.max_file_bytes)
        return core::makeError(fmt::format("{}: {} bytes; the limit is max_file_bytes ({})", where, size,
                                           limits.max_file_bytes));
    std::ifstream in(path, std::ios::binary);
    if (!in) return core::makeError(fmt::format("{}: cannot open for reading", where));
    std::string data(size_t(size), '\0');
    in.read(data.data(), std::streamsize(size));
    if (in.gcount() != std::streamsize(size))
        return core::makeError(fmt::format("{}: read {} of {} bytes (changed while reading?)", where, in.gcount(),
                                           size));
    return readMemorySnapshotBytes(data, where, limits);
}

}  // namespace shardcast::trace
