#include "train/run_dir.h"

#include <cstdio>
#include <filesystem>
#include <stdexcept>

namespace ringstep {

void write_file_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    if (!out) throw std::runtime_error("cannot write '" + tmp + "'");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw std::runtime_error("cannot rename '" + tmp + "' to '" + path + "': " + ec.message());
}

void RunDir::create() {
  std::error_code ec;
  std::filesystem::create_directories(root_, ec);
  if (ec) throw std::runtime_error("cannot create run directory '" + root_ + "': " + ec.message());
  steps_.open(path("steps.jsonl"), std::ios::trunc);
  if (!steps_) throw std::runtime_error("cannot write '" + path("steps.jsonl") + "'");
}

void RunDir::append_step(const std::string& json_line) {
  steps_ << json_line << '\n';
  steps_.flush();  // a reader (report, tail -f) sees whole lines as they come
}

}  // namespace ringstep
