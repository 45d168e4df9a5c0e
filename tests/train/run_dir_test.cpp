#include "train/run_dir.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "core/error.h"
#include "core/files.h"

namespace ringstep {
namespace {

namespace fs = std::filesystem;

std::string error_of(const fs::path& path) {
  try {
    check_creatable(path.string());
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(RunDir, CheckCreatableRefusesWhatMkdirWouldFailOn) {
  const fs::path dir = fs::temp_directory_path() / ("ringstep_rundir_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "file") << "x";
  EXPECT_EQ(error_of(dir / "file" / "run"), "run directory '" + (dir / "file" / "run").string() +
                                                "' cannot be created: '" + (dir / "file").string() +
                                                "' is not a directory");
  EXPECT_NE(error_of(dir / std::string(300, 'n') / "run").find("more than the 255 bytes a name"),
            std::string::npos);
  EXPECT_EQ(error_of(dir), "");                     // exists: reused
  EXPECT_EQ(error_of(dir / "new" / "deeper"), "");  // created with its parents
  EXPECT_EQ(error_of("relative_run"), "");
  // /proc exists and passes access(W_OK) for root, but nothing can be created there.
  if (fs::is_directory("/proc/self"))
    EXPECT_NE(error_of("/proc/ringstep_run").find("nothing can be created in '/proc'"),
              std::string::npos)
        << error_of("/proc/ringstep_run");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1)
      << "only 'file': no probe left behind";
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ringstep

namespace ringstep {
namespace {

std::string Read(const fs::path& p) {
  std::ifstream in(p);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A small tmpfs mounted at a fresh directory, unmounted at the end; empty where this process
// may not mount (not root, or no CAP_SYS_ADMIN in a container).
struct SmallDisk {
  fs::path dir = fs::temp_directory_path() / ("ringstep_disk_" + std::to_string(getpid()));
  bool mounted = false;
  explicit SmallDisk(const std::string& size) {
    fs::create_directories(dir);
    mounted = std::system(("mount -t tmpfs -o size=" + size + " tmpfs " + dir.string() +
                           " 2>/dev/null").c_str()) == 0;
  }
  ~SmallDisk() {
    if (mounted) [[maybe_unused]] int rc = std::system(("umount " + dir.string()).c_str());
    fs::remove_all(dir);
  }
};

TEST(RunDir, AppendAfterTheFileWasRemovedIsAFaultNamingIt) {
  const fs::path root = fs::temp_directory_path() / ("ringstep_rundir_rm" + std::to_string(getpid()));
  fs::remove_all(root);
  RunDir dir(root.string());
  dir.create(0);
  dir.append_step("{\"step\":1}");
  fs::remove(root / "steps.jsonl");
  try {
    dir.append_step("{\"step\":2}");
    FAIL() << "appended to a removed file";
  } catch (const SystemFault& e) {
    EXPECT_NE(std::string(e.what()).find("steps.jsonl' was removed"), std::string::npos)
        << e.what();
  }
  fs::remove_all(root);
}

// A full disk: the record that does not fit is a fault naming the file and the cause, and
// the lines before it stay whole (the cut one is removed); a whole file that does not fit
// leaves neither itself nor its .tmp behind.
TEST(RunDir, AFullDiskIsAFaultAndLeavesOnlyWholeLines) {
  SmallDisk disk("64k");
  if (!disk.mounted) GTEST_SKIP() << "cannot mount a tmpfs here (needs root)";
  RunDir dir((disk.dir / "run").string());
  dir.create(0);
  const std::string line(1000, 'x');
  std::string fault;
  int written = 0;
  try {
    for (; written < 1000; ++written) dir.append_step(line);
  } catch (const SystemFault& e) {
    fault = e.what();
  }
  EXPECT_NE(fault.find("steps.jsonl': No space left on device"), std::string::npos) << fault;
  const std::string text = Read(disk.dir / "run" / "steps.jsonl");
  EXPECT_EQ(text.size(), size_t(written) * (line.size() + 1));
  try {
    write_file_atomic((disk.dir / "run" / "summary.json").string(), std::string(200000, 'y'));
    FAIL() << "wrote 200 kB into 64 kB";
  } catch (const SystemFault& e) {
    EXPECT_NE(std::string(e.what()).find("summary.json.tmp': No space left"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(disk.dir / "run" / "summary.json"));
  EXPECT_FALSE(fs::exists(disk.dir / "run" / "summary.json.tmp"));
}

}  // namespace
}  // namespace ringstep
