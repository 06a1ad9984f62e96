// Hostile-input guards of core: JSON text parsing (depth, duplicate keys, range, UTF-8), bounded
// excerpts, checked arithmetic, the frozen-pattern and module-name limits, module-tree parents.
#include <cstdint>
#include <limits>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/base/checked_math.hpp"
#include "core/base/json_text.hpp"
#include "core/base/limits.hpp"
#include "core/model/model_io.hpp"

namespace sc = shardcast::core;
using nlohmann::json;

namespace {

std::string nested(int levels) { return std::string(static_cast<size_t>(levels), '[') + std::string(static_cast<size_t>(levels), ']'); }

std::string errorOf(const std::string& text) {
    auto j = sc::parseJsonText(text, "f.json");
    EXPECT_FALSE(j.ok()) << text.substr(0, 80);
    return j.ok() ? "" : j.error().message;
}

}  // namespace

TEST(JsonTextTest, NestingUpToTheLimitParses) {
    auto j = sc::parseJsonText(nested(sc::kMaxJsonDepth), "f.json");
    ASSERT_TRUE(j.ok()) << j.error().message;
}

TEST(JsonTextTest, NestingPastTheLimitNamesTheFirstTooDeepBracket) {
    // 65 '[' on line 1: the 65th is at column 65.
    const std::string e = errorOf(nested(sc::kMaxJsonDepth + 1));
    EXPECT_NE(e.find("f.json: line 1, column 65: arrays and objects nest deeper than 64"), std::string::npos) << e;
}

TEST(JsonTextTest, BracketsInsideStringsDoNotNest) {
    auto j = sc::parseJsonText("{\"a\": \"" + std::string(1000, '[') + "\\\"{\"}", "f.json");
    ASSERT_TRUE(j.ok()) << j.error().message;
    EXPECT_EQ(j->at("a").get<std::string>().size(), 1002u);
}

TEST(JsonTextTest, DuplicateKeysAreRefusedAtAnyDepth) {
    EXPECT_NE(errorOf(R"({"a": 1, "a": 2})").find("f.json: duplicate key 'a'"), std::string::npos);
    EXPECT_NE(errorOf(R"({"x": [{"b": 1, "c": {"b": 2}, "b": 3}]})").find("duplicate key 'b'"), std::string::npos);
    // The same key in sibling objects is fine.
    EXPECT_TRUE(sc::parseJsonText(R"([{"a": 1}, {"a": 2}, {"b": {"a": 3}}])", "f.json").ok());
}

TEST(JsonTextTest, NumbersBeyondDoubleAndBadUtf8AreInputErrors) {
    EXPECT_NE(errorOf(R"({"h": 1e400})").find("f.json: a number is out of range"), std::string::npos);
    EXPECT_NE(errorOf("{\"h\": \"\xff\"}").find("f.json: malformed JSON at line 1, column"), std::string::npos);
    // Syntax errors keep their line and column (third line, third character).
    EXPECT_NE(errorOf("{\n\"a\": 1,\n  }").find("f.json: malformed JSON at line 3, column 3"), std::string::npos);
}

TEST(JsonTextTest, ExcerptsAreBounded) {
    EXPECT_EQ(sc::jsonExcerpt(json(42)), "42");
    EXPECT_EQ(sc::jsonExcerpt(json::parse("[1, -2]")), "[1,-2]");
    // 80 characters (the quote and 79 x), then the mark. (Built by append: GCC 12 warns wrongly
    // about operator+ on temporaries here.)
    std::string want(1, '"');
    want.append(79, 'x').append("...");
    EXPECT_EQ(sc::jsonExcerpt(json(std::string(1000, 'x'))), want);
    json big = json::array();
    for (int i = 0; i < 1000; ++i) big.push_back(i);
    EXPECT_EQ(sc::jsonExcerpt(big), "an array of 1000 items");
    // A cut never splits a UTF-8 sequence: 79 ASCII bytes then a 2-byte character at 79..80.
    std::string text(79, 'a');
    text.append("\xc3\xa9zz");
    std::string cut(79, 'a');
    cut.append("...");
    EXPECT_EQ(sc::textExcerpt(text), cut);
}

TEST(JsonTextTest, Utf8Validation) {
    EXPECT_TRUE(sc::isValidUtf8("plain \xe2\x82\xac \xf0\x9f\x98\x80"));  // euro sign, emoji
    EXPECT_FALSE(sc::isValidUtf8("\xff"));
    EXPECT_FALSE(sc::isValidUtf8("\xc0\x80"));          // overlong NUL
    EXPECT_FALSE(sc::isValidUtf8("\xed\xa0\x80"));      // UTF-16 surrogate U+D800
    EXPECT_FALSE(sc::isValidUtf8("\xf4\x90\x80\x80"));  // U+110000, past the last code point
    EXPECT_FALSE(sc::isValidUtf8("\xe2\x82"));          // truncated
    EXPECT_NE(sc::checkUtf8("\xff", "--frozen").error().message.find("--frozen: is not valid UTF-8"), std::string::npos);
}

TEST(CheckedMathTest, OverflowIsReportedNotWrapped) {
    constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
    EXPECT_EQ(sc::checkedMul(3037000499, 3037000499), int64_t{9223372030926249001});  // floor(sqrt(2^63 - 1))^2
    EXPECT_FALSE(sc::checkedMul(3037000500, 3037000500).has_value());
    EXPECT_FALSE(sc::checkedMul(kMax, 2).has_value());
    EXPECT_EQ(sc::checkedAdd(kMax - 1, 1), kMax);
    EXPECT_FALSE(sc::checkedAdd(kMax, 1).has_value());
    EXPECT_EQ(sc::checkedRound(2.5, 0, 10), 3);
    EXPECT_FALSE(sc::checkedRound(1e300, 0, kMax).has_value());
    EXPECT_FALSE(sc::checkedRound(std::numeric_limits<double>::quiet_NaN(), 0, 10).has_value());
}

TEST(LimitsTest, FrozenPatternLengthAndNesting) {
    namespace lim = sc::limits;
    EXPECT_TRUE(lim::checkFrozenPattern(std::string(16, '(') + "a" + std::string(16, ')'), "--frozen").ok());
    const std::string deep = std::string(17, '(') + "a" + std::string(17, ')');
    EXPECT_NE(lim::checkFrozenPattern(deep, "--frozen").error().message.find("--frozen: groups nest at most 16 levels deep (got 17"),
              std::string::npos);
    EXPECT_TRUE(lim::checkFrozenPattern(std::string(1024, 'a'), "--frozen").ok());
    EXPECT_FALSE(lim::checkFrozenPattern(std::string(1025, 'a'), "--frozen").ok());
    EXPECT_TRUE(lim::checkFrozenPattern(R"(\(\(\(\(\(\(\(\(\(\(\(\(\(\(\(\(\(x)", "--frozen").ok());  // escaped
}

TEST(LimitsTest, ModuleNameParts) {
    namespace lim = sc::limits;
    std::string name = "a";
    for (int i = 1; i < 64; ++i) name += ".a";  // 64 parts
    EXPECT_TRUE(lim::checkModuleName(name, "name").ok());
    EXPECT_NE(lim::checkModuleName(name + ".a", "name").error().message.find("at most 64 dotted parts (got 65"),
              std::string::npos);
}

TEST(LimitsTest, ModuleTreeCreatesEveryParentInOrder) {
    // "a.b.c" alone creates a, a.b, a.b.c, each the parent of the next; a later "a.x" reuses a.
    const json tree = json::parse(R"({"format": "shardcast-module-tree/1", "modules": [
        {"name": "a.b.c", "params": [{"name": "w", "shape": [4]}],
         "ops": [{"name": "f", "kind": "other", "flops_per_token": 1, "saved_bytes_per_token": 0}]},
        {"name": "a.x"}]})");
    auto m = sc::importModuleTree(tree, "t", "t.json");
    ASSERT_TRUE(m.ok()) << m.error().message;
    ASSERT_EQ(m->modules.size(), 5u);  // root, a, a.b, a.b.c, a.x
    EXPECT_EQ(m->modules[1].name, "a");
    EXPECT_EQ(m->modules[1].parent, 0);
    EXPECT_EQ(m->modules[2].name, "a.b");
    EXPECT_EQ(m->modules[2].parent, 1);
    EXPECT_EQ(m->modules[3].name, "a.b.c");
    EXPECT_EQ(m->modules[3].parent, 2);
    EXPECT_EQ(m->modules[4].name, "a.x");
    EXPECT_EQ(m->modules[4].parent, 1);
}
