#pragma once
// The version of this build: CMake's PROJECT_VERSION (core/CMakeLists.txt passes it to every target
// that links shardcast_core), so `shardcast --version` and the store's records say the same.
#include <string_view>

namespace shardcast::core {

inline constexpr std::string_view kShardcastVersion = SHARDCAST_VERSION;

}  // namespace shardcast::core
