#include "train/run_dir.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <iterator>
#include <fstream>
#include <string>

#include "core/error.h"

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
