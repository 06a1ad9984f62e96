// Speed target of the trace reader (issue 23): >= 300 MB/s of uncompressed Kineto JSON on one core,
// and >= 10x HolisticTraceAnalysis loading the same files (scripts/bench-trace-import.py).
//
// The public DDP trace (tests/data/traces/gpu-public) is inflated into a temporary folder, and a
// ~100 MB trace is made from it by repeating its events, each copy shifted later in time, so
// the reader streams a file far larger than its window. Plain files measure the reader itself;
// gzip files add zlib's inflation. bytes_per_second counts inflated JSON bytes per wall-clock second.
//
// --trace=PATH (repeatable, before the benchmark flags) adds a benchmark of that file, plain or
// gzip, named after it: the HTA comparison script times the very files it gives HTA.
#include <benchmark/benchmark.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "trace/kineto_reader.hpp"

using namespace shardcast;

namespace {

[[noreturn]] void fail(const std::string& message) {
    std::fprintf(stderr, "trace_bench: %s\n", message.c_str());
    std::exit(2);
}

class BenchDir {
public:
    BenchDir() {
        std::string pattern = (std::filesystem::temp_directory_path() / "shardcast-trace-bench-XXXXXX").string();
        if (!::mkdtemp(pattern.data())) fail("mkdtemp " + pattern);
        m_path = pattern;
    }
    ~BenchDir() {
        std::error_code ec;
        std::filesystem::remove_all(m_path, ec);
    }
    BenchDir(const BenchDir&) = delete;
    BenchDir& operator=(const BenchDir&) = delete;
    const std::filesystem::path& path() const { return m_path; }

private:
    std::filesystem::path m_path;
};

std::string inflateFile(const std::filesystem::path& path) {
    gzFile f = gzopen(path.c_str(), "rb");
    if (f == nullptr) fail("cannot open " + path.string());
    std::string out;
    std::vector<char> buf(size_t{1} << 20);
    for (;;) {
        const int n = gzread(f, buf.data(), static_cast<unsigned>(buf.size()));
        if (n < 0) fail("cannot inflate " + path.string());
        if (n == 0) break;
        out.append(buf.data(), static_cast<size_t>(n));
    }
    gzclose(f);
    return out;
}

void writeFile(const std::filesystem::path& path, std::string_view bytes) {
    std::ofstream out(path, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) fail("cannot write " + path.string());
}

// The end of the bracketed value starting at text[open] (strings skipped): enough for a trace
// written by Kineto, which is all this bench is given.
size_t matchingClose(std::string_view text, size_t open) {
    int depth = 0;
    bool in_string = false;
    for (size_t i = open; i < text.size(); ++i) {
        const char c = text[i];
        if (in_string) {
            if (c == '\\') ++i;
            else if (c == '"') in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            ++depth;
        } else if ((c == ']' || c == '}') && --depth == 0) {
            return i;
        }
    }
    fail("unbalanced JSON in the source trace");
}

// Appends `events` (the inside of a traceEvents array) with every "ts" moved `shift_us` later. The
// number's text is rewritten, not reformatted, so the copy reads exactly like Kineto's own output.
void appendShifted(std::string& out, std::string_view events, int64_t shift_us) {
    constexpr std::string_view kTs = "\"ts\": ";
    size_t at = 0;
    for (;;) {
        const size_t hit = events.find(kTs, at);
        if (hit == std::string_view::npos) break;
        const size_t num = hit + kTs.size();
        size_t end = num;
        while (end < events.size() && events[end] >= '0' && events[end] <= '9') ++end;
        out.append(events.substr(at, num - at));
        if (end == num) {
            at = num;
            continue;
        }
        int64_t whole = 0;
        for (size_t i = num; i < end; ++i) whole = whole * 10 + (events[i] - '0');
        out += std::to_string(whole + shift_us);
        at = end;
    }
    out.append(events.substr(at));
}

// A trace of at least `target_bytes`: the source's events repeated, copy k shifted by k times the
// source's span, between the source's own top-level keys.
std::string repeatTrace(const std::string& src, size_t target_bytes) {
    const size_t key = src.find("\"traceEvents\"");
    if (key == std::string::npos) fail("the source trace has no traceEvents");
    const size_t open = src.find('[', key);
    const size_t close = matchingClose(src, open);
    std::string_view events = std::string_view(src).substr(open + 1, close - open - 1);
    while (!events.empty() && std::isspace(static_cast<unsigned char>(events.back()))) events.remove_suffix(1);
    auto t = trace::readKinetoTraceBytes(src, "source trace");
    if (!t) fail(t.error().message);
    int64_t lo = INT64_MAX, hi = 0;
    for (const auto& e : t->events) {
        lo = std::min(lo, e.ts_ns);
        hi = std::max(hi, e.endNs());
    }
    const int64_t span_us = (hi - lo) / 1000 + 1000;
    const size_t copies = std::max<size_t>(1, (target_bytes + events.size() - 1) / events.size());
    std::string out(src.substr(0, open + 1));
    out.reserve(copies * events.size() + src.size());
    for (size_t k = 0; k < copies; ++k) {
        if (k > 0) out += ",";
        appendShifted(out, events, static_cast<int64_t>(k) * span_us);
    }
    out += "\n  ";
    out.append(src.substr(close));
    return out;
}

// Reads `path` once per iteration; `prepare` first makes the file when it is one of ours (outside
// the timed loop).
void readFile(benchmark::State& state, const std::filesystem::path& path, const std::function<void()>& prepare) {
    if (prepare) prepare();
    int64_t bytes = 0, kept = 0;
    for (auto _ : state) {
        auto t = trace::readKinetoTrace(path);
        if (!t) {
            state.SkipWithError(t.error().message.c_str());
            return;
        }
        bytes += t->bytes_read;
        kept = static_cast<int64_t>(t->events.size());
        benchmark::DoNotOptimize(t->events.data());
    }
    state.SetBytesProcessed(bytes);
    state.counters["MB_inflated"] = static_cast<double>(bytes) / 1e6 / static_cast<double>(state.iterations());
    state.counters["events_kept"] = static_cast<double>(kept);
}

bool isGzip(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    unsigned char magic[2] = {0, 0};
    in.read(reinterpret_cast<char*>(magic), 2);
    return magic[0] == 0x1f && magic[1] == 0x8b;
}

void add(const std::string& name, const std::filesystem::path& path, std::function<void()> prepare = {}) {
    benchmark::RegisterBenchmark(name.c_str(), [path, prepare](benchmark::State& s) { readFile(s, path, prepare); })
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<std::filesystem::path> extra;
    std::vector<char*> args;
    for (int i = 0; i < argc; ++i) {
        const std::string_view a = argv[i];
        if (a.starts_with("--trace=")) extra.emplace_back(std::string(a.substr(8)));
        else args.push_back(argv[i]);
    }
    int n = static_cast<int>(args.size());

    const std::filesystem::path traces = std::filesystem::path(SHARDCAST_SOURCE_DIR) / "tests/data/traces/gpu-public";
    const std::filesystem::path ddp_gz = traces / "ddp-2ranks-nccl-rank0.json.gz";
    // The plain files are written on first use, so a run filtered to other benchmarks (the HTA
    // script's --trace files) neither waits for nor stores the 100 MB one.
    BenchDir dir;
    const auto plain = [&dir, ddp_gz] {
        if (std::filesystem::exists(dir.path() / "ddp.json")) return;
        writeFile(dir.path() / "ddp.json", inflateFile(ddp_gz));
    };
    const auto repeated = [&dir, ddp_gz] {
        if (std::filesystem::exists(dir.path() / "ddp-x10.json")) return;
        writeFile(dir.path() / "ddp-x10.json", repeatTrace(inflateFile(ddp_gz), size_t{100} << 20));
    };
    add("BM_ReadKineto_Plain/ddp_9.8MB", dir.path() / "ddp.json", plain);
    add("BM_ReadKineto_Plain/ddp_repeated_100MB", dir.path() / "ddp-x10.json", repeated);
    add("BM_ReadKineto_Gzip/ddp_9.8MB", ddp_gz);
    add("BM_ReadKineto_Gzip/16ranks_25.8MB", traces / "16ranks-reduce-scatter-rank0.json.gz");
    for (const auto& p : extra) {
        add(std::string(isGzip(p) ? "BM_ReadKineto_Gzip/" : "BM_ReadKineto_Plain/") + p.filename().string(), p);
    }

    benchmark::Initialize(&n, args.data());
    if (benchmark::ReportUnrecognizedArguments(n, args.data())) return 1;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
