#pragma once
// SHA-256 (FIPS 180-4, "Secure Hash Standard", NIST 2015, sections 4.1.2, 4.2.2, 5.1.1, 6.2): the
// content hash that makes saving the same plan twice find the first one.
#include <string>
#include <string_view>

namespace shardcast::db {

// The digest of `data` as 64 lowercase hex digits.
std::string sha256Hex(std::string_view data);

}  // namespace shardcast::db
