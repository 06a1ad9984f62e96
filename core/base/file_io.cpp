#include "core/base/file_io.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <nlohmann/json.hpp>

namespace shardcast::core {

namespace {

std::string fileKind(mode_t mode) {
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
    if (S_ISSOCK(mode)) return "a socket";
    return "not a regular file";
}

Error ioError(const std::filesystem::path& path, std::string_view what) {
    return makeError("cannot write '" + path.string() + "': " + std::string(what) + ": " + std::strerror(errno));
}

}  // namespace

std::string formatByteCap(int64_t bytes) {
    if (bytes % (int64_t{1} << 30) == 0) return std::to_string(bytes >> 30) + " GiB";
    if (bytes % (int64_t{1} << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
    if (bytes % (int64_t{1} << 10) == 0) return std::to_string(bytes >> 10) + " KiB";
    return std::to_string(bytes) + " bytes";
}

Result<std::string> readFileBounded(const std::filesystem::path& path, int64_t max_bytes, std::string_view what) {
    const std::string shown = path.string();
    const std::string named = "'" + shown + "'";
    // O_NONBLOCK: opening a FIFO with no writer must not wait; it is refused below.
    const int fd = ::open(shown.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return makeError("cannot open " + named + ": " + std::strerror(errno));
    struct FdCloser {
        int fd;
        ~FdCloser() { ::close(fd); }
    } closer{fd};
    struct stat st {};
    if (::fstat(fd, &st) != 0) return makeError("cannot read " + named + ": " + std::strerror(errno));
    if (!S_ISREG(st.st_mode)) {
        return makeError("cannot read " + named + ": it is " + fileKind(st.st_mode) + "; a " + std::string(what) +
                         " must be a regular file");
    }
    const auto too_big = [&](const std::string& size) {
        return makeError(named + " is " + size + ", over the " + formatByteCap(max_bytes) + " limit for a " +
                         std::string(what) + " (docs/limits.md)");
    };
    if (st.st_size > max_bytes) return too_big(std::to_string(st.st_size) + " bytes");
    std::string text;
    text.reserve(static_cast<size_t>(st.st_size));
    char buf[65536];
    // The file may grow after fstat: never hold more than the cap plus one buffer.
    for (;;) {
        const ssize_t n = ::read(fd, buf, sizeof buf);
        if (n < 0) {
            if (errno == EINTR) continue;
            return makeError("cannot read " + named + ": " + std::strerror(errno));
        }
        if (n == 0) break;
        text.append(buf, static_cast<size_t>(n));
        if (static_cast<int64_t>(text.size()) > max_bytes) return too_big("more than " + formatByteCap(max_bytes));
    }
    return text;
}

namespace {

Status writeAll(int fd, std::string_view content, const std::filesystem::path& path) {
    const char* p = content.data();
    size_t left = content.size();
    while (left > 0) {
        const ssize_t n = ::write(fd, p, left);
        if (n < 0) {
            if (errno == EINTR) continue;
            return ioError(path, "write");
        }
        p += n;
        left -= static_cast<size_t>(n);
    }
    return Ok{};
}

// A character device or a FIFO the user named (/dev/stdout, a pipe to another program) is a
// stream, not a file kept: written in place, every error (ENOSPC from /dev/full, at close too)
// reported. O_NONBLOCK at open refuses a FIFO nobody reads instead of waiting for ever.
Status writeStream(const std::filesystem::path& path, std::string_view content) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENXIO) return makeError("cannot write '" + path.string() + "': no process is reading the FIFO");
        return ioError(path, "open");
    }
    const int flags = ::fcntl(fd, F_GETFL);
    if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
        Error e = ioError(path, "fcntl");
        ::close(fd);
        return e;
    }
    if (auto s = writeAll(fd, content, path); !s) {
        ::close(fd);
        return s;
    }
    if (::close(fd) != 0) return ioError(path, "close");
    return Ok{};
}

}  // namespace

Status writeFileAtomically(const std::filesystem::path& path, std::string_view content) {
    struct stat target {};
    if (::stat(path.c_str(), &target) == 0 && !S_ISREG(target.st_mode)) {
        if (S_ISCHR(target.st_mode) || S_ISFIFO(target.st_mode)) return writeStream(path, content);
        return makeError("cannot write '" + path.string() + "': it is " + fileKind(target.st_mode) +
                         "; give the path of a regular file");
    }
    const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
    std::string name = ".";  // appended, not concatenated: GCC 12 -Wrestrict false positive on "." + string
    name += path.filename().string();
    name += ".tmp-XXXXXX";
    std::string tmpl = (dir / name).string();
    const int fd = ::mkstemp(tmpl.data());
    if (fd < 0) return ioError(path, "creating a temporary file in '" + dir.string() + "'");
    auto fail = [&](Error e) {
        ::close(fd);
        ::unlink(tmpl.c_str());
        return e;
    };
    if (auto s = writeAll(fd, content, path); !s) return fail(s.error());
    // mkstemp creates 0600; a kept file gets the usual permissions (0666 less the umask).
    const mode_t mask = ::umask(0);
    ::umask(mask);
    if (::fchmod(fd, 0666 & ~mask) != 0) return fail(ioError(path, "fchmod"));
    if (::fsync(fd) != 0) return fail(ioError(path, "fsync"));
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
    // The rename is durable once the directory is synced. The new file is in place either way, so
    // a file system that cannot sync a directory (EINVAL) is not an error.
    if (const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
        ::fsync(dfd);
        ::close(dfd);
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
