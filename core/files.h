// Reading a user's input files, and writing a run's outputs. Only regular files are read or
// mapped (after following symlinks): a directory, a FIFO or a device such as /dev/zero is
// refused before a byte is read, so no reader can hang or fill memory on one. Every read
// failure is an InputError naming the file; every write failure is a SystemFault
// (core/error.h) naming the file and the cause, with nothing half-written left behind.
#pragma once

#include <cstddef>
#include <limits>
#include <string>
#include <string_view>

namespace ringstep {

constexpr size_t kNoSizeLimit = std::numeric_limits<size_t>::max();

// True when PATH names something after following symlinks, false when it does not exist.
// Throws InputError "WHAT 'PATH': REASON" when it cannot be resolved otherwise (a symlink
// loop, a component that is not a directory, no permission).
bool input_exists(const std::string& path, const std::string& what);

// The whole of PATH, a regular file of at most MAX_BYTES. WHAT names it in messages
// ("config", "token file"). Throws InputError when PATH is missing, is not a regular file,
// is larger than MAX_BYTES (the message states the limit) or cannot be read.
std::string read_regular_file(const std::string& path, size_t max_bytes, const std::string& what);

// Writes all of BYTES to the open file FD (PATH names it in messages), retrying short
// writes. Throws SystemFault.
void write_all(int fd, std::string_view bytes, const std::string& path);

// Writes TEXT to PATH whole or not at all: PATH.tmp, fsynced when SYNC, then renamed over
// PATH. On failure PATH.tmp is removed and PATH is as it was. Throws SystemFault.
void write_file_atomic(const std::string& path, std::string_view text, bool sync = false);

// A regular file mapped read-only, for inputs too large to copy into every rank (token
// shards): the pages are the page cache's, shared by the ranks of a node, and read when
// touched. Throws InputError as read_regular_file does (no size limit). The file must not
// shrink while mapped: touching a page past its new end raises SIGBUS. Movable, not copyable.
class MappedFile {
 public:
  MappedFile(const std::string& path, const std::string& what);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const unsigned char* data() const { return data_; }  // null when size() is 0
  size_t size() const { return size_; }

 private:
  unsigned char* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace ringstep
