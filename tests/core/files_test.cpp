#include "core/files.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"

namespace ringstep {
namespace {

namespace fs = std::filesystem;

fs::path Scratch() {
  fs::path p = fs::temp_directory_path() / ("ringstep_files_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

// The InputError message of reading PATH with MAX_BYTES, or "" when it reads.
std::string error_of(const fs::path& path, size_t max_bytes = kNoSizeLimit) {
  try {
    read_regular_file(path.string(), max_bytes, "config");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(Files, ReadsARegularFileThroughASymlink) {
  const fs::path dir = Scratch();
  std::ofstream(dir / "a.yaml") << "x: 1\n";
  fs::create_symlink(dir / "a.yaml", dir / "link.yaml");
  EXPECT_EQ(read_regular_file((dir / "link.yaml").string(), 5, "config"), "x: 1\n");
  fs::remove_all(dir);
}

TEST(Files, RefusesWhatIsNotARegularFileBeforeReading) {
  const fs::path dir = Scratch();
  EXPECT_NE(error_of(dir).find("' is a directory, expected a regular file"), std::string::npos)
      << error_of(dir);
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0600), 0);  // opening it would block
  EXPECT_NE(error_of(dir / "fifo").find("is a FIFO"), std::string::npos);
  EXPECT_NE(error_of("/dev/zero").find("'/dev/zero' is a character device"), std::string::npos);
  EXPECT_NE(error_of(dir / "none").find("cannot read config '"), std::string::npos);
  EXPECT_NE(error_of("").find("the path is empty"), std::string::npos);
  fs::remove_all(dir);
}

TEST(Files, RefusesAFileOverTheLimitAndSaysTheLimit) {
  const fs::path dir = Scratch();
  std::ofstream(dir / "big.yaml") << std::string((1 << 20) + 1, '#');
  EXPECT_NE(error_of(dir / "big.yaml", 1 << 20)
                .find("big.yaml' is 1048577 bytes, more than the limit of 1 MiB"),
            std::string::npos)
      << error_of(dir / "big.yaml", 1 << 20);
  EXPECT_EQ(error_of(dir / "big.yaml", (1 << 20) + 1), "");
  fs::remove_all(dir);
}

TEST(Files, SymlinkLoopIsAnInputError) {
  const fs::path dir = Scratch();
  fs::create_symlink(dir / "b", dir / "a");
  fs::create_symlink(dir / "a", dir / "b");
  EXPECT_THROW(input_exists((dir / "a").string(), "run directory"), InputError);
  EXPECT_NE(error_of(dir / "a").find("symbolic links"), std::string::npos) << error_of(dir / "a");
  EXPECT_FALSE(input_exists((dir / "none").string(), "config"));
  fs::remove_all(dir);
}

// The InputError message of mapping PATH, or "" when it maps.
std::string map_error_of(const fs::path& path) {
  try {
    MappedFile file(path.string(), "token file");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(Files, MapsARegularFileWithTheChecksOfReading) {
  const fs::path dir = Scratch();
  std::ofstream(dir / "t.bin", std::ios::binary) << std::string("to\0ken", 6);
  MappedFile file((dir / "t.bin").string(), "token file");
  ASSERT_EQ(file.size(), 6u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(file.data()), 6), std::string("to\0ken", 6));
  MappedFile moved = std::move(file);
  EXPECT_EQ(moved.size(), 6u);
  EXPECT_EQ(moved.data()[5], 'n');
  std::ofstream(dir / "empty.bin");
  EXPECT_EQ(MappedFile((dir / "empty.bin").string(), "token file").size(), 0u);
  EXPECT_NE(map_error_of(dir).find("token file '" + dir.string() +
                                   "' is a directory, expected a regular file"),
            std::string::npos);
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0600), 0);
  EXPECT_NE(map_error_of(dir / "fifo").find("is a FIFO"), std::string::npos);
  EXPECT_NE(map_error_of(dir / "none").find("cannot read token file '"), std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ringstep
