#!/usr/bin/env bash
# Installs the build dependencies on Debian 12 (apt) and builds shardswap into
# build/ (Release, warnings as errors). Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
pkgs="build-essential cmake pkg-config libopenblas-dev libdnnl-dev libpcre2-dev libjansson-dev clang
  libmicrohttpd-dev libyaml-dev libcurl4-openssl-dev curl prometheus python3 python3-venv
  libopenmpi-dev openmpi-bin"
if ! dpkg -s $pkgs >/dev/null 2>&1; then
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $pkgs >/dev/null
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DSHARDSWAP_WERROR=ON >/dev/null
cmake --build build -j"$(nproc)"
