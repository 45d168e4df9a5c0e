// `ringstep --version`: what was built and what it runs on here, in one line.
#pragma once

#include <string>

namespace ringstep {

// "ringstep 0.1.0 (git 1a2b3c4[-dirty] | unknown, Release build, CUDA backend off, BLAS ...,
// sgemm kernel ...)". The version and hash come from the build (tools/build_info.cmake); the
// BLAS and sgemm kernel are those this process picks on this machine (the log header's).
std::string version_line();

}  // namespace ringstep
