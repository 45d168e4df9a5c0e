#!/usr/bin/env bash
# Downloads (does not install) the Debian packages that ringstep's CMake needs and a bare
# GPU machine lacks, into gpu_deps/ (gitignored, ~20 MB). tools/gpu_check.sh unpacks them
# there with dpkg -x and points CMake at the copy. Run here, on the Debian build machine,
# before a `run` that carries gpu_deps. docs/gpu.md.
set -euo pipefail
cd "$(dirname "$0")/.."
# Build-time: headers, CMake configs and link libraries. Run-time: what libmpi.so.40 and
# libyaml-cpp load (a bare Ubuntu image has libc, libstdc++, libgomp, libudev, zlib).
PACKAGES=(
  libeigen3-dev nlohmann-json3-dev libcli11-dev libgtest-dev libxxhash-dev libxxhash0
  libyaml-cpp-dev libyaml-cpp0.7
  libopenmpi-dev libopenmpi3 openmpi-common openmpi-bin
  libevent-core-2.1-7 libevent-pthreads-2.1-7 libhwloc15 libltdl7 libfabric1 libibverbs1
  librdmacm1 libnl-3-200 libnl-route-3-200 libnuma1 libpmix2 libmunge2 libucx0 libpsm2-2
  libpsm-infinipath1 libpciaccess0 libxml2 libicu72 libxnvctrl0
)
mkdir -p gpu_deps
cd gpu_deps
apt-get download "${PACKAGES[@]}"
du -sh .
