// The reliability cases of issue 9 with real files and real processes: writers in parallel with a
// reader, a writer killed with SIGKILL at random points, a full disk and a read-only folder.
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "db/store.hpp"
#include "tests/db/temp_store.hpp"

namespace {

using namespace shardcast::db;
using shardcast::db::testing::readBytes;
using shardcast::db::testing::writeBytes;
using shardcast::db::testing::sampleTimeline;
using shardcast::db::testing::samplePrediction;
using shardcast::db::testing::contains;
using shardcast::db::testing::TempDir;
using nlohmann::json;
namespace fs = std::filesystem;

// Runs `body` in a child process (which never returns into GoogleTest) with its stdout on a pipe;
// the parent gets the pid and the pipe's read end. No Store may be open in the parent at fork.
struct Child {
    pid_t pid = -1;
    int out = -1;
};

// The children of one test: a failed assertion returns early, and the destructor then kills and
// reaps those not yet waited for, so no writer or reader outlives its test.
class Children {
public:
    Children() = default;
    Children(const Children&) = delete;
    Children& operator=(const Children&) = delete;
    ~Children() {
        for (pid_t pid : m_running) {
            ::kill(pid, SIGKILL);
            ::waitpid(pid, nullptr, 0);
        }
    }

    Child spawn(const std::function<int(int out)>& body) {
        int fds[2];
        EXPECT_EQ(::pipe(fds), 0);
        const pid_t pid = ::fork();
        if (pid == 0) {
            ::close(fds[0]);
            int code = 99;
            try {
                code = body(fds[1]);
            } catch (...) {
            }
            ::_exit(code);
        }
        ::close(fds[1]);
        m_running.push_back(pid);
        return Child{pid, fds[0]};
    }

    // The exit code, or 128 + the signal that ended it.
    int wait(const Child& child) {
        int status = 0;
        ::waitpid(child.pid, &status, 0);
        std::erase(m_running, child.pid);
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }

private:
    std::vector<pid_t> m_running;
};

// The child's first line (blocking until it is written), newline included.
std::string readLine(int fd) {
    std::string line;
    char c = 0;
    while (::read(fd, &c, 1) == 1) {
        line += c;
        if (c == '\n') break;
    }
    return line;
}

// Everything the child wrote until it exited (or died).
std::string drain(int fd) {
    std::string all;
    char buf[4096];
    for (;;) {
        const ssize_t n = ::read(fd, buf, sizeof buf);
        if (n <= 0) break;
        all.append(buf, static_cast<size_t>(n));
    }
    ::close(fd);
    return all;
}

// The child's side of a failure: its message on the pipe, and the exit code.
int failWith(int out, const std::string& message, int code) {
    const std::string line = message + "\n";
    [[maybe_unused]] const ssize_t n = ::write(out, line.data(), line.size());
    return code;
}

// One line per successful save, written with one write(2) right after save returned.
void report(int out, int64_t seq, const ObjectId& id) {
    const std::string line = std::to_string(seq) + " " + formatId(id) + "\n";
    [[maybe_unused]] const ssize_t n = ::write(out, line.data(), line.size());
}

std::vector<std::pair<int64_t, ObjectId>> parseReports(const std::string& text) {
    std::vector<std::pair<int64_t, ObjectId>> out;
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
        if (in.eof() && !text.empty() && text.back() != '\n') break;  // a line cut by the kill
        std::istringstream fields(line);
        int64_t seq = 0;
        std::string id;
        fields >> seq >> id;
        auto parsed = parseId(id);
        EXPECT_TRUE(parsed.ok()) << line;
        if (parsed.ok()) out.emplace_back(seq, *parsed);
    }
    return out;
}

// A prediction whose content is a pure function of `seq`, large enough that a save takes a while.
PredictionInput bigPrediction(int64_t seq) {
    PredictionInput in = samplePrediction(seq);
    in.timeline = sampleTimeline(seq, 3000);
    return in;
}

void expectPredictionIs(const Store& store, const ObjectId& id, int64_t seq) {
    auto got = store.get(id);
    ASSERT_TRUE(got.ok()) << got.error().message;
    const PredictionInput want = bigPrediction(seq);
    EXPECT_EQ(got->body.at("timeline").dump(), want.timeline.dump()) << formatId(id);
    EXPECT_EQ(got->body.at("summary"), want.summary) << formatId(id);
    EXPECT_EQ(got->body.at("memory"), want.memory) << formatId(id);
    EXPECT_EQ(got->name, want.name) << formatId(id);
}

TEST(StoreReliabilityTest, TwoWritersAndAReaderLoseNothing) {
    TempDir dir;
    const fs::path path = dir / "store.db";
    // No store yet: the three processes also race to create it and run the migrations.
    const fs::path stop = dir / "stop";
    Children children;
    constexpr int kSweepSaves = 1000, kGuiSaves = 200;

    // The "CLI sweep": 1,000 predictions, each with its own plan.
    Child sweep = children.spawn([&](int out) {
        auto store = Store::open(path);
        if (!store) return failWith(out, store.error().message, 1);
        for (int64_t seq = 0; seq < kSweepSaves; ++seq) {
            PredictionInput in = samplePrediction(seq);
            auto id = (*store)->savePrediction(in);
            if (!id) return failWith(out, id.error().message, 2);
            report(out, seq, *id);
        }
        return 0;
    });
    // The "GUI": plans and profiles at the same time.
    Child gui = children.spawn([&](int out) {
        auto store = Store::open(path);
        if (!store) return failWith(out, store.error().message, 1);
        for (int64_t seq = 0; seq < kGuiSaves; ++seq) {
            auto id = seq % 2 == 0 ? (*store)->savePlan(shardcast::db::testing::samplePlan(100000 + seq), "gui", "")
                                   : (*store)->saveProfile({"gui", "c", "file", {{"seq", seq}}, ""});
            if (!id) return failWith(out, id.error().message, 2);
            report(out, seq, *id);
        }
        return 0;
    });
    // A reader: every listed object reads back and decodes, however often it looks.
    Child reader = children.spawn([&](int out) {
        auto store = Store::open(path);
        if (!store) return failWith(out, store.error().message, 1);
        int64_t reads = 0;
        for (bool last = false; !last;) {
            last = fs::exists(stop);  // one more pass after the writers finished
            auto entries = (*store)->list(std::nullopt, std::nullopt);
            if (!entries) return failWith(out, entries.error().message, 2);
            for (size_t i = 0; i < entries->size() && i < 50; ++i) {
                auto object = (*store)->get((*entries)[i].id);
                if (!object) return failWith(out, object.error().message, 3);
                if ((*entries)[i].id.kind == Kind::prediction && !object->body.at("timeline").contains("tasks")) return 4;
                ++reads;
            }
        }
        const std::string line = std::to_string(reads) + "\n";
        [[maybe_unused]] const ssize_t n = ::write(out, line.data(), line.size());
        return 0;
    });

    const std::string sweep_out = drain(sweep.out), gui_out = drain(gui.out);
    ASSERT_EQ(children.wait(sweep), 0) << sweep_out.substr(sweep_out.rfind('\n', sweep_out.size() - 2) + 1);
    ASSERT_EQ(children.wait(gui), 0) << gui_out.substr(gui_out.rfind('\n', gui_out.size() - 2) + 1);
    writeBytes(stop, "");
    const std::string reader_out = drain(reader.out);
    ASSERT_EQ(children.wait(reader), 0) << reader_out;
    EXPECT_GT(std::stoll(reader_out), 0) << "the reader never read an object";

    auto store = Store::open(path);
    ASSERT_TRUE(store.ok());
    const auto sweep_ids = parseReports(sweep_out), gui_ids = parseReports(gui_out);
    ASSERT_EQ(sweep_ids.size(), static_cast<size_t>(kSweepSaves));
    ASSERT_EQ(gui_ids.size(), static_cast<size_t>(kGuiSaves));
    for (const auto& [seq, id] : sweep_ids) {
        auto got = (*store)->get(id);
        ASSERT_TRUE(got.ok()) << got.error().message;
        EXPECT_EQ(got->body.at("timeline"), samplePrediction(seq).timeline);
        EXPECT_EQ((*store)->get(got->links.at(0))->body.at("plan"), samplePrediction(seq).plan);
    }
    for (const auto& [seq, id] : gui_ids) {
        auto got = (*store)->get(id);
        ASSERT_TRUE(got.ok()) << got.error().message;
        if (id.kind == Kind::plan) EXPECT_EQ(got->body.at("plan"), shardcast::db::testing::samplePlan(100000 + seq));
        else EXPECT_EQ(got->body.at("profile"), (json{{"seq", seq}}));
    }
    auto check = (*store)->check();
    EXPECT_EQ(check->integrity, "ok");
    EXPECT_EQ(check->predictions, kSweepSaves);
    EXPECT_EQ(check->plans, kSweepSaves + kGuiSaves / 2);
    EXPECT_EQ(check->profiles, kGuiSaves / 2);
}

TEST(StoreReliabilityTest, AWriterKilledAtRandomPointsLosesNoReportedSave) {
    TempDir dir;
    const fs::path path = dir / "store.db";
    const unsigned seed = std::random_device{}();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    // After the writer's first reported save, so the kill lands in its save loop whatever a save
    // costs on this machine (a sanitizer build is several times slower).
    std::uniform_int_distribution<int> delay_us(0, 20'000);
    std::map<int64_t, ObjectId> saved;  // seq -> id, across all rounds
    Children children;
    int64_t next_seq = 0;
    int killed_mid_run = 0;
    for (int round = 0; round < 25; ++round) {
        const int64_t first = next_seq;
        Child writer = children.spawn([&](int out) {
            auto store = Store::open(path);
            if (!store) return 1;
            for (int64_t seq = first;; ++seq) {
                auto id = (*store)->savePrediction(bigPrediction(seq));
                if (!id) return 2;
                report(out, seq, *id);
            }
        });
        const std::string first_line = readLine(writer.out);
        std::this_thread::sleep_for(std::chrono::microseconds(delay_us(rng)));
        ::kill(writer.pid, SIGKILL);
        const std::string out = first_line + drain(writer.out);
        const int code = children.wait(writer);
        ASSERT_EQ(code, 128 + SIGKILL) << "the writer ended on its own in round " << round;
        ++killed_mid_run;
        for (const auto& [seq, id] : parseReports(out)) {
            saved[seq] = id;
            next_seq = std::max(next_seq, seq + 1);
        }
        next_seq += 1;  // the save that may have been cut off is never reused

        auto store = Store::open(path);
        ASSERT_TRUE(store.ok()) << "round " << round << ": " << store.error().message;
        auto check = (*store)->check();
        ASSERT_TRUE(check.ok()) << check.error().message;
        ASSERT_EQ(check->integrity, "ok") << "round " << round;
    }
    EXPECT_EQ(killed_mid_run, 25);
    auto store = Store::open(path);
    ASSERT_TRUE(store.ok());
    EXPECT_GE(saved.size(), 25u);  // at least the first save of each round
    for (const auto& [seq, id] : saved) expectPredictionIs(**store, id, seq);
    EXPECT_GE((*store)->check()->predictions, static_cast<int64_t>(saved.size()));
}

// A store with a few objects; returns them with their sequence numbers.
std::map<int64_t, ObjectId> fillStore(const fs::path& path) {
    std::map<int64_t, ObjectId> saved;
    auto store = Store::open(path);
    EXPECT_TRUE(store.ok());
    for (int64_t seq = 0; seq < 5; ++seq) saved[seq] = *(*store)->savePrediction(bigPrediction(seq));
    return saved;
}

void expectIntact(const fs::path& path, const std::map<int64_t, ObjectId>& saved) {
    auto store = Store::open(path);
    ASSERT_TRUE(store.ok()) << store.error().message;
    auto check = (*store)->check();
    EXPECT_EQ(check->integrity, "ok");
    EXPECT_EQ(check->predictions, static_cast<int64_t>(saved.size()));
    EXPECT_EQ(check->plans, static_cast<int64_t>(saved.size()));
    for (const auto& [seq, id] : saved) expectPredictionIs(**store, id, seq);
}

// Several MB of JSON that zlib cannot shrink much: random hex.
PredictionInput hugePrediction() {
    PredictionInput in = bigPrediction(999);
    std::mt19937_64 rng(7);
    std::string noise;
    for (int i = 0; i < 1'000'000; ++i) noise += "0123456789abcdef"[rng() % 16];
    in.timeline["noise"] = noise;
    return in;
}

TEST(StoreReliabilityTest, ASaveOnAFullDiskFailsClearlyAndKeepsTheData) {
    TempDir dir;
    const fs::path path = dir / "store.db";
    const auto saved = fillStore(path);
    Children children;
    const auto limit = static_cast<rlim_t>(std::max<uintmax_t>(fs::file_size(path), 65536) + 65536);
    Child writer = children.spawn([&](int out) {
        ::signal(SIGXFSZ, SIG_IGN);  // then a write past the limit fails with EFBIG instead of killing
        const rlimit rl{limit, limit};
        if (::setrlimit(RLIMIT_FSIZE, &rl) != 0) return 5;
        auto store = Store::open(path);
        if (!store) return failWith(out, store.error().message, 1);
        auto id = (*store)->savePrediction(hugePrediction());
        if (id) return 3;
        const std::string msg = id.error().message;
        [[maybe_unused]] const ssize_t n = ::write(out, msg.data(), msg.size());
        return 0;
    });
    const std::string message = drain(writer.out);
    ASSERT_EQ(children.wait(writer), 0) << "exit 3: the save succeeded past the size limit";
    EXPECT_TRUE(contains(message, path.string())) << message;
    EXPECT_TRUE(contains(message, "disk is full") || contains(message, "disk I/O error")) << message;
    EXPECT_TRUE(contains(message, "ulimit")) << message;
    expectIntact(path, saved);
}

TEST(StoreReliabilityTest, ASaveInAReadOnlyFolderFailsClearlyAndKeepsTheData) {
    TempDir dir;
    // Root ignores permission bits, so the child drops to user nobody when the test runs as root.
    ::chmod(dir.path().c_str(), 0755);
    const fs::path folder = dir / "ro";
    fs::create_directory(folder);
    const fs::path path = folder / "store.db";
    const auto saved = fillStore(path);
    ::chmod(path.c_str(), 0444);
    ::chmod(folder.c_str(), 0555);
    Children children;
    Child writer = children.spawn([&](int out) {
        if (::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) return 5;
        if (::access(path.c_str(), W_OK) == 0) return 6;  // the permissions are not enforced here
        auto store = Store::open(path);
        std::string msg;
        if (store) {
            auto id = (*store)->savePrediction(bigPrediction(42));
            if (id) return 3;
            msg = id.error().message;
        } else {
            msg = store.error().message;
        }
        [[maybe_unused]] const ssize_t n = ::write(out, msg.data(), msg.size());
        return 0;
    });
    const std::string message = drain(writer.out);
    const int code = children.wait(writer);
    ::chmod(folder.c_str(), 0755);
    ::chmod(path.c_str(), 0644);
    if (code == 5 || code == 6) GTEST_SKIP() << "cannot make a read-only file here (running as root without setuid)";
    ASSERT_EQ(code, 0) << "exit 3: the save succeeded in a read-only folder";
    EXPECT_TRUE(contains(message, path.string())) << message;
    EXPECT_TRUE(contains(message, "writable")) << message;
    expectIntact(path, saved);
}

}  // namespace
