#!/usr/bin/env bash
# Installs the Debian 12 packages ringstep needs, only those missing. Idempotent.
# Usage: tools/install_deps.sh [--test] [--netns]   (--test adds what only tests use: PyTorch,
# which checks the exported weights against ringstep's loss; --netns what the namespace hosts
# of launch/testhosts and their measurements use: ip/tc, iperf3, ethtool)
set -euo pipefail
pkgs=(cmake g++ make libeigen3-dev libyaml-cpp-dev libopenmpi-dev openmpi-bin
      libgtest-dev nlohmann-json3-dev libcli11-dev libbenchmark-dev libopenblas-openmp-dev
      libxxhash-dev python3 python3-matplotlib)
for opt in "$@"; do
  case "$opt" in
    --test) pkgs+=(python3-torch) ;;
    --netns) pkgs+=(iproute2 iperf3 ethtool) ;;
    *) echo "install_deps: unknown option '$opt' (--test, --netns)" >&2; exit 2 ;;
  esac
done
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install_deps: all packages present"
  exit 0
fi
echo "install_deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
