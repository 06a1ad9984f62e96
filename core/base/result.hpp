#pragma once
// A minimal expected-like result type: a user's bad input is a value, not an exception.
#include <cassert>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace shardcast::core {

struct Error {
    std::string message;  // names the file or flag, the field and what would be valid
    bool cancelled = false;  // the work was abandoned on request (not the input's fault)
};

template <class T>
class [[nodiscard]] Result {
public:
    Result(T value) : m_v(std::in_place_index<0>, std::move(value)) {}
    Result(Error error) : m_v(std::in_place_index<1>, std::move(error)) {}

    bool ok() const { return m_v.index() == 0; }
    explicit operator bool() const { return ok(); }
    T& value() & { assert(ok()); return std::get<0>(m_v); }
    const T& value() const& { assert(ok()); return std::get<0>(m_v); }
    T&& value() && { assert(ok()); return std::get<0>(std::move(m_v)); }
    T* operator->() { return &value(); }
    const T* operator->() const { return &value(); }
    T& operator*() & { return value(); }
    const T& operator*() const& { return value(); }
    const Error& error() const { assert(!ok()); return std::get<1>(m_v); }

private:
    std::variant<T, Error> m_v;
};

struct Ok {};
using Status = Result<Ok>;

inline Error makeError(std::string message) { return Error{std::move(message), false}; }
inline Error cancelledError() { return Error{"cancelled", true}; }

}  // namespace shardcast::core
