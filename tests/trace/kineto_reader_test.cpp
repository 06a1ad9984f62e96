// The Kineto reader on real traces (two public GPU traces with NCCL, real CPU FSDP2 traces made by
// scripts/torch_fsdp_trace.py) and on hostile input: every bad file is an error naming it, never a crash.
#include <gtest/gtest.h>
#include <zlib.h>

#include <map>
#include <string>

#include "trace/kineto_reader.hpp"

namespace shardcast::trace {
namespace {

const std::string kTraces = std::string(SHARDCAST_SOURCE_DIR) + "/tests/data/traces/";

std::map<std::pair<std::string, int32_t>, int> ncclKernelsByStream(const RankTrace& t, const std::string& prefix) {
    std::map<std::pair<std::string, int32_t>, int> out;
    for (const Event& e : t.events) {
        const std::string_view n = t.name(e);
        if (e.category == Category::Kernel && n.starts_with(prefix)) ++out[{std::string(prefix), e.stream}];
    }
    return out;
}

// Counts from the files' SOURCES.md (HolisticTraceAnalysis test data): the DDP trace has 15
// ncclKernel_AllReduce_RING_LL_Sum_float kernels (one per nccl:all_reduce pair) and 40,573 events;
// the 16-rank trace 80 SendRecv kernels and 108,936 events.
TEST(KinetoReaderTest, PublicDdpTraceCountsNcclKernelsOnTheirStream) {
    auto t = readKinetoTrace(kTraces + "gpu-public/ddp-2ranks-nccl-rank0.json.gz");
    ASSERT_TRUE(t) << t.error().message;
    EXPECT_EQ(t->events_read, 40573);
    EXPECT_EQ(t->rank, 0);
    EXPECT_EQ(t->world_size, 2);
    EXPECT_EQ(t->backend, "nccl");
    EXPECT_EQ(t->per_category[static_cast<size_t>(Category::Kernel)], 2700);
    const auto all_reduce = ncclKernelsByStream(*t, "ncclKernel_AllReduce_RING_LL_Sum_float");
    ASSERT_EQ(all_reduce.size(), 1u);
    EXPECT_EQ(all_reduce.begin()->first.second, 40);  // NCCL's own stream
    EXPECT_EQ(all_reduce.begin()->second, 15);
    int cpu_all_reduce = 0;
    for (const Event& e : t->events) cpu_all_reduce += t->name(e) == "nccl:all_reduce" ? 1 : 0;
    EXPECT_EQ(cpu_all_reduce, 30);
}

TEST(KinetoReaderTest, PublicSixteenRankTraceCountsSendRecvKernelsPerStream) {
    auto t = readKinetoTrace(kTraces + "gpu-public/16ranks-reduce-scatter-rank0.json.gz");
    ASSERT_TRUE(t) << t.error().message;
    EXPECT_EQ(t->events_read, 108936);
    EXPECT_EQ(t->world_size, 16);
    EXPECT_EQ(t->per_category[static_cast<size_t>(Category::Kernel)], 6080);
    const auto send_recv = ncclKernelsByStream(*t, "ncclKernel_SendRecv");
    int total = 0;
    for (const auto& [key, n] : send_recv) total += n;
    EXPECT_EQ(total, 80);
    EXPECT_EQ(send_recv.size(), 3u);  // three NCCL streams
    EXPECT_EQ((send_recv.at({"ncclKernel_SendRecv", 84})), 36);
}

TEST(KinetoReaderTest, CpuFsdp2TraceKeepsLabelsMemoryAndTimesToTheNanosecond) {
    auto t = readKinetoTrace(kTraces + "llama-block-2r/rank0.json.gz");
    ASSERT_TRUE(t) << t.error().message;
    EXPECT_EQ(t->backend, "gloo");
    EXPECT_EQ(t->rank, 0);
    int gloo = 0, pre_forward = 0;
    for (const Event& e : t->events) {
        gloo += t->name(e).starts_with("gloo:") ? 1 : 0;
        pre_forward += t->name(e) == "FSDP::pre_forward (model.layers.0)" ? 1 : 0;
    }
    EXPECT_EQ(gloo, 14);  // 9 all-gathers and 5 reduce-scatters (LABELS.md)
    EXPECT_EQ(pre_forward, 1);
    EXPECT_GT(t->memory.size(), 1000u);
    for (const MemoryEvent& m : t->memory) EXPECT_GE(m.total_allocated, 0);
}

TEST(KinetoReaderTest, ParsesMicrosecondsExactlyAndStringIds) {
    const std::string doc = R"({"traceEvents": [
        {"ph": "X", "name": "a", "pid": "Spans", "tid": 3, "ts": 1683564901548726.123, "dur": 0.5},
        {"ph": "X", "name": "b", "pid": 7, "tid": 7, "ts": 12, "dur": 1.2345}]})";
    auto t = readKinetoTraceBytes(doc, "inline");
    ASSERT_TRUE(t) << t.error().message;
    ASSERT_EQ(t->events.size(), 2u);
    EXPECT_EQ(t->events[0].ts_ns, 1683564901548726123);
    EXPECT_EQ(t->events[0].dur_ns, 500);
    EXPECT_LT(t->events[0].pid, 0);  // a string pid
    EXPECT_EQ(t->events[1].ts_ns, 12000);
    EXPECT_EQ(t->events[1].dur_ns, 1234);
}

std::string gzip(const std::string& s) {
    uLongf n = compressBound(static_cast<uLong>(s.size())) + 32;
    std::string out(n, '\0');
    z_stream z{};
    deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(s.data()));
    z.avail_in = static_cast<uInt>(s.size());
    z.next_out = reinterpret_cast<Bytef*>(out.data());
    z.avail_out = static_cast<uInt>(out.size());
    deflate(&z, Z_FINISH);
    out.resize(z.total_out);
    deflateEnd(&z);
    return out;
}

void expectError(const std::string& bytes, const std::string& needle, const ReadLimits& limits = {}) {
    auto t = readKinetoTraceBytes(bytes, "bad.json", limits);
    ASSERT_FALSE(t) << "accepted: " << bytes.substr(0, 80);
    EXPECT_NE(t.error().message.find("bad.json"), std::string::npos) << t.error().message;
    EXPECT_NE(t.error().message.find(needle), std::string::npos) << t.error().message;
}

TEST(KinetoReaderTest, HostileTracesAreErrorsNamingTheFile) {
    const std::string good = R"({"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 5, "dur": 1}]})";
    ASSERT_TRUE(readKinetoTraceBytes(good, "good.json"));
    ASSERT_TRUE(readKinetoTraceBytes(gzip(good), "good.json.gz"));
    const std::string gz = gzip(good);
    expectError(gz.substr(0, gz.size() / 2), "truncated gzip");
    expectError(good.substr(0, good.size() - 3), "truncated");
    expectError("", "empty file");
    expectError("{\"traceEvents\": 5}", "not an array");
    expectError("{\"other\": 1}", "no traceEvents");
    expectError(R"({"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": NaN, "dur": 1}]})", "traceEvents[0]");
    expectError(R"({"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": -5, "dur": 1}]})", "non-negative");
    expectError(R"({"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 5, "dur": -1}]})", "traceEvents[0].dur");
    expectError(R"({"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1e300, "dur": 1}]})", "traceEvents[0].ts");
    expectError(R"({"traceEvents": [{"ph": "X", "name": "a", "pid": 1.5, "tid": 1, "ts": 5}]})", "pid");
    expectError(R"({"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1}]})", "no ts");
    expectError(R"({"distributedInfo": {"rank": 3, "world_size": 2}, "traceEvents": []})", "not below world_size");
    std::string deep = "{\"traceEvents\": [{\"args\": ";
    for (int i = 0; i < 100; ++i) deep += "[";
    expectError(deep, "nesting deeper than 64");
    // A string far over the per-event limit is refused once it passes the limit, not read whole.
    ReadLimits small;
    small.max_event_bytes = 1 << 16;
    std::string huge = R"({"traceEvents": [{"ph": "X", "name": ")" + std::string(1 << 20, 'x') + R"(", "ts": 1}]})";
    expectError(huge, "larger than the limit", small);
    ReadLimits tiny_file;
    tiny_file.max_file_bytes = 100;
    expectError(huge, "larger than the limit", tiny_file);
}

TEST(KinetoReaderTest, AnEventWithoutANameIsNamedEmpty) {
    auto t = readKinetoTraceBytes(R"({"traceEvents": [{"ph": "X", "pid": 1, "tid": 1, "ts": 5, "dur": 1}]})", "inline");
    ASSERT_TRUE(t) << t.error().message;
    ASSERT_EQ(t->events.size(), 1u);
    EXPECT_EQ(t->name(t->events[0]), "");
}

TEST(KinetoReaderTest, OutOfOrderEventsAreKeptInFileOrder) {
    const std::string doc = R"({"traceEvents": [
        {"ph": "X", "name": "late", "pid": 1, "tid": 1, "ts": 50, "dur": 1},
        {"ph": "X", "name": "early", "pid": 1, "tid": 1, "ts": 10, "dur": 1}]})";
    auto t = readKinetoTraceBytes(doc, "inline");
    ASSERT_TRUE(t);
    ASSERT_EQ(t->events.size(), 2u);
    EXPECT_EQ(t->name(t->events[0]), "late");
    EXPECT_EQ(t->events[1].ts_ns, 10000);
}

// The scanner cuts events 64 bytes at a time and leaves blocks with a backslash to a byte-at-a-time
// path: quotes, backslashes and brackets inside strings, at every offset from a block's start, must
// not end an event early or late. Escaped keys and names are read as their unescaped text.
TEST(KinetoReaderTest, EscapesAndBracketsInStringsAtEveryOffset) {
    std::string doc = R"({"traceEvents": [)";
    const int kEvents = 200;
    for (int i = 0; i < kEvents; ++i) {
        if (i > 0) doc += ",";
        doc += std::string(static_cast<size_t>(i % 67), ' ');
        const std::string tail = i % 3 == 0 ? R"(\"}])" : i % 3 == 1 ? R"(\\)" : R"({[\\\"]})";
        doc += R"({"ph": "X", "n\u0061me": ")" + std::string(static_cast<size_t>(i % 71), 'a') + tail +
               R"(", "args": {"Input Dims": [[1, 2], []], "note": "]}\"", "str\u0065am": )" + std::to_string(i) +
               R"(}, "pid": 1, "tid": 1, "ts": )" + std::to_string(i) + "}";
    }
    doc += "]}";
    auto t = readKinetoTraceBytes(doc, "inline");
    ASSERT_TRUE(t) << t.error().message;
    ASSERT_EQ(t->events.size(), static_cast<size_t>(kEvents));
    for (int i = 0; i < kEvents; ++i) {
        const Event& e = t->events[static_cast<size_t>(i)];
        const std::string tail = i % 3 == 0 ? "\"}]" : i % 3 == 1 ? "\\" : "{[\\\"]}";
        EXPECT_EQ(t->name(e), std::string(static_cast<size_t>(i % 71), 'a') + tail) << i;
        EXPECT_EQ(e.stream, i);
        EXPECT_EQ(e.ts_ns, int64_t{i} * 1000);
    }
}

TEST(KinetoReaderTest, MissingFileAndDirectoryAreErrors) {
    auto a = readKinetoTrace(kTraces + "no-such-file.json");
    ASSERT_FALSE(a);
    EXPECT_NE(a.error().message.find("cannot open"), std::string::npos);
    auto b = readKinetoTrace(kTraces);
    ASSERT_FALSE(b);
    EXPECT_NE(b.error().message.find("directory"), std::string::npos);
}

}  // namespace
}  // namespace shardcast::trace
