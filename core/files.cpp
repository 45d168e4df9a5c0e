#include "core/files.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <utility>

#include "core/error.h"

namespace ringstep {
namespace {

namespace fs = std::filesystem;

std::string kind_of(fs::file_type type) {
  switch (type) {
    case fs::file_type::directory:
      return "a directory";
    case fs::file_type::fifo:
      return "a FIFO";
    case fs::file_type::character:
      return "a character device";
    case fs::file_type::block:
      return "a block device";
    case fs::file_type::socket:
      return "a socket";
    default:
      return "not a regular file";
  }
}

// "1 MiB", "16 MiB"; bytes when below 1 MiB.
std::string size_text(size_t bytes) {
  return bytes >= (size_t{1} << 20) ? std::to_string(bytes >> 20) + " MiB"
                                    : std::to_string(bytes) + " bytes";
}

// Throws InputError unless PATH is non-empty and names a regular file (after symlinks).
void check_regular_file(const std::string& path, const std::string& what) {
  if (path.empty()) throw InputError(what + ": the path is empty, expected a file");
  if (!input_exists(path, what)) {
    throw InputError("cannot read " + what + " '" + path + "': " + std::strerror(ENOENT));
  }
  std::error_code ec;
  const fs::file_type type = fs::status(path, ec).type();
  if (type != fs::file_type::regular) {
    throw InputError(what + " '" + path + "' is " + kind_of(type) + ", expected a regular file");
  }
}

}  // namespace

bool input_exists(const std::string& path, const std::string& what) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (st.type() == fs::file_type::not_found) return false;
  if (ec) throw InputError(what + " '" + path + "': " + ec.message());
  return true;
}

std::string read_regular_file(const std::string& path, size_t max_bytes, const std::string& what) {
  check_regular_file(path, what);
  std::error_code ec;
  const uintmax_t size = fs::file_size(path, ec);
  if (!ec && size > max_bytes) {
    throw InputError(what + " '" + path + "' is " + std::to_string(size) +
                     " bytes, more than the limit of " + size_text(max_bytes));
  }
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), std::fclose);
  if (!f) throw InputError("cannot read " + what + " '" + path + "': " + std::strerror(errno));
  std::string text;
  char buf[1 << 16];
  // The limit holds while reading too: the file may grow after the size was taken.
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f.get())) > 0;) {
    if (n > max_bytes - text.size()) {
      throw InputError(what + " '" + path + "' grew past the limit of " + size_text(max_bytes));
    }
    text.append(buf, n);
  }
  if (std::ferror(f.get())) {
    throw InputError("cannot read " + what + " '" + path + "': " + std::strerror(errno));
  }
  return text;
}

void write_all(int fd, std::string_view bytes, const std::string& path) {
  for (size_t done = 0; done < bytes.size();) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw io_fault("write", path, errno);
    done += size_t(n);
  }
}

void write_file_atomic(const std::string& path, std::string_view text, bool sync) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw io_fault("create", tmp, errno);
  // Removes TMP, then throws ACTION's fault (close may have failed: FD is closed by then).
  auto fail = [&](const char* action, int err, bool close_fd) {
    if (close_fd) ::close(fd);
    ::unlink(tmp.c_str());
    throw io_fault(action, tmp, err);
  };
  try {
    write_all(fd, text, tmp);
  } catch (const SystemFault&) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (sync && ::fsync(fd) != 0) fail("fsync", errno, true);
  if (::close(fd) != 0) fail("close", errno, false);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw io_fault("rename '" + tmp + "' to", path, err);
  }
}

MappedFile::MappedFile(const std::string& path, const std::string& what) {
  check_regular_file(path, what);
  // O_NONBLOCK: should PATH have become a FIFO since the check, open must not wait for a writer.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  struct stat st {};
  int err = fd < 0 ? errno : ::fstat(fd, &st) != 0 ? errno : S_ISREG(st.st_mode) ? 0 : EINVAL;
  size_ = static_cast<size_t>(st.st_size);
  if (err == 0 && size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
      err = errno;
    else
      data_ = static_cast<unsigned char*>(p);
  }
  if (fd >= 0) ::close(fd);  // a mapping keeps the file open
  if (err != 0) throw InputError("cannot read " + what + " '" + path + "': " + std::strerror(err));
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(data_, size_);
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (data_) ::munmap(data_, size_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

}  // namespace ringstep
