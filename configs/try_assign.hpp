#pragma once
// The config readers' one way out on a bad field: `SHARDCAST_TRY_ASSIGN(x, reader.integer(...));`
// declares `x` as the value of a core::Result, or returns its error from the enclosing function
// (which returns a core::Result or a core::Status). Private to configs/.
#define SHARDCAST_TRY_ASSIGN(var, expr)   \
    auto var##_r = (expr);                \
    if (!var##_r) return var##_r.error(); \
    const auto var = *var##_r
