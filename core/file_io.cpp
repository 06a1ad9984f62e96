#include "core/file_io.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <nlohmann/json.hpp>

namespace shardcast::core {

namespace {

Error ioError(const std::filesystem::path& path, std::string_view what) {
    return makeError("cannot write '" + path.string() + "': " + std::string(what) + ": " + std::strerror(errno));
}

}  // namespace

Status writeFileAtomically(const std::filesystem::path& path, std::string_view content) {
    const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
    std::string name = ".";  // appended, not concatenated: GCC 12 -Wrestrict false positive on "." + string
    name += path.filename().string();
    name += ".tmp-XXXXXX";
    std::string tmpl = (dir / name).string();
    const int fd = ::mkstemp(tmpl.data());
    if (fd < 0) return ioError(path, "creating a temporary file in '" + dir.string() + "'");
    auto fail = [&](std::string_view what) {
        Error e = ioError(path, what);
        ::close(fd);
        ::unlink(tmpl.c_str());
        return e;
    };
    const char* p = content.data();
    size_t left = content.size();
    while (left > 0) {
        const ssize_t n = ::write(fd, p, left);
        if (n < 0) {
            if (errno == EINTR) continue;
            return fail("write");
        }
        p += n;
        left -= static_cast<size_t>(n);
    }
    // mkstemp creates 0600; a kept file gets the usual permissions (0666 less the umask).
    const mode_t mask = ::umask(0);
    ::umask(mask);
    if (::fchmod(fd, 0666 & ~mask) != 0) return fail("fchmod");
    if (::fsync(fd) != 0) return fail("fsync");
    if (::close(fd) != 0) {
        Error e = ioError(path, "close");
        ::unlink(tmpl.c_str());
        return e;
    }
    if (::rename(tmpl.c_str(), path.c_str()) != 0) {
        Error e = ioError(path, "rename");
        ::unlink(tmpl.c_str());
        return e;
    }
    return Ok{};
}

nlohmann::json documentHeader(std::string_view kind, int version) {
    nlohmann::json j = nlohmann::json::object();
    j["format"] = "shardcast-" + std::string(kind);
    j["version"] = version;
    return j;
}

Status checkDocumentHeader(const nlohmann::json& j, std::string_view kind, int supported_version,
                           const std::string& where) {
    const std::string expected = "shardcast-" + std::string(kind);
    if (!j.is_object()) return makeError(where + ": expected a JSON object (a " + expected + " document)");
    const auto f = j.find("format");
    if (f == j.end() || !f->is_string() || f->get<std::string>() != expected) {
        return makeError(where + ": field 'format' must be \"" + expected + "\"" +
                         (f != j.end() && f->is_string() ? " (got \"" + f->get<std::string>() + "\")" : ""));
    }
    const auto v = j.find("version");
    if (v == j.end() || !v->is_number_integer() || v->get<int64_t>() < 1) {
        return makeError(where + ": field 'version' must be an integer from 1 to " + std::to_string(supported_version));
    }
    if (v->get<int64_t>() > supported_version) {
        return makeError(where + ": " + expected + " format version " + std::to_string(v->get<int64_t>()) +
                         " is newer than this shardcast reads (version " + std::to_string(supported_version) +
                         "); upgrade shardcast");
    }
    return Ok{};
}

}  // namespace shardcast::core
