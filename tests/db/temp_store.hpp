#pragma once
// Shared by the db tests: a fresh temporary folder per test (removed after) and small documents
// whose content is a pure function of a sequence number, so a second process can check them.
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "db/store.hpp"

namespace shardcast::db::testing {

class TempDir {
public:
    TempDir() {
        std::string pattern = (std::filesystem::temp_directory_path() / "shardcast-db-XXXXXX").string();
        const char* made = ::mkdtemp(pattern.data());
        EXPECT_NE(made, nullptr) << "mkdtemp " << pattern;
        m_path = pattern;
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(m_path, ec);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    const std::filesystem::path& path() const { return m_path; }
    std::filesystem::path operator/(const std::string& name) const { return m_path / name; }

private:
    std::filesystem::path m_path;
};

inline bool contains(const std::string& haystack, const std::string& needle) {
    return haystack.find(needle) != std::string::npos;
}

inline std::string readBytes(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void writeBytes(const std::filesystem::path& path, const std::string& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << bytes;
}

// A plan-shaped document distinct per `seq` (the store keeps any JSON a plan serializes to).
inline nlohmann::json samplePlan(int64_t seq) {
    return {{"format", "shardcast-plan"},
            {"version", 1},
            {"model", "llama-3.1-8b"},
            {"cluster", {{"gpu", "H100-SXM"}, {"nodes", 1 + seq % 4}, {"gpus_per_node", 8}}},
            {"training", {{"micro_batch", 1 + seq}, {"seq_len", 4096}, {"note", "ünïcode ✓ 'quoted' \"x\"; DROP TABLE plans"}}}};
}

// A timeline-shaped document of `tasks` tasks, doubles and integers that must read back exactly.
inline nlohmann::json sampleTimeline(int64_t seq, int tasks = 50) {
    nlohmann::json list = nlohmann::json::array();
    for (int i = 0; i < tasks; ++i) list.push_back({seq * 1000 + i * 7, seq * 1000 + i * 7 + 5, i % 3});
    return {{"format", "shardcast-timeline"}, {"version", 1}, {"step_ns", seq * 12345 + 1}, {"tasks", list},
            {"ratio", 1.0 / 3.0 + static_cast<double>(seq)}};
}

inline PredictionInput samplePrediction(int64_t seq) {
    PredictionInput in;
    in.name = "pred " + std::to_string(seq);
    in.plan = samplePlan(seq);
    in.headroom = 0.1 + static_cast<double>(seq) / 8;
    in.summary = {{"step_s", 2.5 + static_cast<double>(seq)}, {"peak_bytes", int64_t{61} << 30}};
    in.timeline = sampleTimeline(seq);
    in.memory = {{"categories", {"params", "grads"}}, {"curve", {{0, 0, {1, 2}}, {seq, 1, {3, 4}}}}};
    in.summary_line = std::to_string(seq) + ".00 s, 61.0 GiB";
    return in;
}

}  // namespace shardcast::db::testing
