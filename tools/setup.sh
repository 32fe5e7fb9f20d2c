#!/usr/bin/env bash
# Installs the build dependencies on Debian 12 (apt), fetches oneDNN 3.x into
# .deps/onednn (pip), and builds shardswap into build/ (Release, warnings as
# errors). Safe to run again: what is there is not fetched again.
set -euo pipefail
cd "$(dirname "$0")/.."
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
pkgs="build-essential cmake pkg-config libopenblas-dev libdnnl-dev libpcre2-dev libjansson-dev clang
  libmicrohttpd-dev libyaml-dev libcurl4-openssl-dev curl prometheus python3 python3-venv python3-pip
  libopenmpi-dev openmpi-bin"
if ! dpkg -s $pkgs >/dev/null 2>&1; then
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $pkgs >/dev/null
fi
# oneDNN 3.x (the CPU-only GNU OpenMP build, from its two Python wheels) into
# .deps/onednn (include/, lib/; git ignores it), where CMake looks before the
# system's libdnnl-dev (2.6 on Debian 12, which runs bf16 matmuls on AVX-512
# without its BF16 kernels). Offline, the build uses the system's.
dnnl_version=2023.2.0
dnnl_dir=.deps/onednn
if [ ! -e "$dnnl_dir/.unpacked-$dnnl_version" ]; then
  tmp=$(mktemp -d)
  if python3 -m pip download -q --no-deps -d "$tmp" "onednn-cpu-gomp==$dnnl_version" \
    "onednn-devel-cpu-gomp==$dnnl_version" >"$tmp/log" 2>&1; then
    rm -rf "$dnnl_dir"
    mkdir -p "$dnnl_dir"
    for w in "$tmp"/*.whl; do python3 -m zipfile -e "$w" "$tmp/x"; done
    # a wheel's files are under <name>-<version>.data/data/ (the prefix)
    cp -R "$tmp"/x/*.data/data/. "$dnnl_dir"/
    rm -rf "$dnnl_dir/lib/cmake"
    # zip keeps no symbolic links: the wheel holds the library three times
    (cd "$dnnl_dir/lib" && rm -f libdnnl.so libdnnl.so.3.2 && ln -s libdnnl.so.3 libdnnl.so)
    touch "$dnnl_dir/.unpacked-$dnnl_version"
  else
    echo "setup.sh: could not download oneDNN $dnnl_version ($(tail -n 1 "$tmp/log")); building with the system's libdnnl-dev" >&2
  fi
  rm -rf "$tmp"
fi
# the configure's line naming the oneDNN it found
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DSHARDSWAP_WERROR=ON | { grep '^-- oneDNN:' || true; }
cmake --build build -j"$(nproc)"
