#!/usr/bin/env bash
# Gathers, on a machine with apt and network, what the one-shot GPU check
# (tests/gpu/run.sh) needs on a GPU machine that has neither: the Debian
# packages of shardswap's build dependencies and the libraries they load
# (downloaded, not installed: no root needed), and Python wheels for the
# transformers comparison. run.sh unpacks them into a private prefix.
#
#   bash tools/gpu_deps.sh [DIR]      (default DIR: .gpu-deps, git-ignored)
#
# DIR/debs/*.deb    the build dependencies' closure, minus what every base
#                   system has (libc, libgcc, libstdc++, zlib, ...)
# DIR/wheels/*.whl  transformers, tokenizers, safetensors, huggingface-hub
#                   and their dependencies for CPython 3.12 on x86-64 Linux
#                   (numpy left out: PyTorch's environment has it)
# DIR/MANIFEST      what is there, and what was dropped to stay under the size limit
#
# DIR is kept under GPU_DEPS_LIMIT_MIB (default 50 MiB: a GPU run moves at most
# 64 MiB, the repository's tree of about 7 MiB and the carried folders together):
# when it is over, wheels the GPU machine's PyTorch environment most likely has
# already go first, and the script says which.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-.gpu-deps}
limit_mib=${GPU_DEPS_LIMIT_MIB:-50}
py_version=${GPU_PY_VERSION:-3.12}
abi="cp${py_version/./}"

# the direct build dependencies (tools/setup.sh), one openblas variant
roots="libopenblas-dev libopenblas-pthread-dev libopenblas0-pthread libdnnl-dev libdnnl2 libpcre2-dev
  libjansson-dev libmicrohttpd-dev libyaml-dev libcurl4-openssl-dev pkgconf pkgconf-bin libpkgconf3"
# what any Debian/Ubuntu with a C toolchain already has, and what we must not
# shadow (the compiler's own runtime: libgomp, libstdc++, libgcc)
base="libc6 libc6-dev libc-dev-bin linux-libc-dev libcrypt1 libcrypt-dev libgcc-s1 libstdc++6
  gcc-12-base gcc-13-base gcc-14-base libgomp1 zlib1g libzstd1 liblzma5 libbz2-1.0 libselinux1
  libnsl2 libnsl-dev libtirpc3 libtirpc-dev libtirpc-common rpcsvc-proto libffi8 debconf
  perl-base dpkg tar libacl1 libattr1 libaudit1 libcap-ng0 libcap2 libmd0 libpam0g libdb5.3
  libgnutls-dane0 libgnutls-openssl27 libgnutlsxx30 libunbound8 libevent-2.1-7 libgmpxx4ldbl"
# not needed: the -dev packages that only libmicrohttpd.pc's Requires.private (gnutls)
# asks for (run.sh deletes that line: nothing links statically), and pcre2's
# 16- and 32-bit libraries
unneeded="libgnutls28-dev nettle-dev libgmp-dev libidn2-dev libtasn1-6-dev libp11-kit-dev
  libpcre2-16-0 libpcre2-32-0 libpcre2-posix3"
# wheels, from the least needed (hf_xet only downloads; the rest are common in a
# PyTorch environment): dropped in this order while DIR is too big
drop_order="hf_xet pygments rich markdown_it_py mdurl pydantic pydantic_core annotated_types
  typing_inspection truststore click typer shellingham anyio idna h11 annotated_doc"

mkdir -p "$dir/debs" "$dir/wheels"
dir=$(cd "$dir" && pwd)
manifest="$dir/MANIFEST"
: >"$manifest"

# --- Debian packages --------------------------------------------------------
if ! apt-cache show libjansson-dev >/dev/null 2>&1; then
  echo "gpu_deps: apt has no package lists; running apt-get update" >&2
  apt-get update -qq || { echo "gpu_deps: apt-get update failed (needs root?)" >&2; exit 1; }
fi
# shellcheck disable=SC2086 # word splitting of the package lists is intended
closure=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
  --no-replaces --no-enhances $roots | grep -v '^ ' | grep -v '^<' | sort -u)
want=""
for p in $closure; do
  case " ${base//$'\n'/ } ${unneeded//$'\n'/ } " in *" $p "*) continue ;; esac
  case $p in *openblas*-openmp* | *openblas*-serial* | libopenblas0 | libopenblas64*) continue ;; esac
  want="$want $p"
done
echo "gpu_deps: downloading$(echo "$want" | wc -w | tr -d ' ') Debian packages into $dir/debs" >&2
rm -f "$dir"/debs/*.deb
# shellcheck disable=SC2086
(cd "$dir/debs" && apt-get download $want 2>&1 | grep -v '^W: Download is performed unsandboxed' >&2)
{
  echo "# Debian packages ($(grep -m1 '^PRETTY_NAME=' /etc/os-release | cut -d= -f2)), left out as base:"
  echo "# ${base//$'\n'/ }"
  echo "# and as not needed: ${unneeded//$'\n'/ }"
  ls "$dir/debs"
} >>"$manifest"

# --- Python wheels ------------------------------------------------------------
pins=$(grep -E '^(transformers|tokenizers|safetensors|huggingface_hub)==' tools/requirements.txt | tr '\n' ' ')
rm -f "$dir"/wheels/*.whl
if python3 -m pip --version >/dev/null 2>&1; then
  # shellcheck disable=SC2086
  if ! python3 -m pip download -q --only-binary=:all: --python-version "$py_version" --implementation cp \
    --abi "$abi" --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform any -d "$dir/wheels" $pins >&2; then
    echo "gpu_deps: pip download failed: no wheels (the comparison needs transformers on the GPU machine)" >&2
  fi
  rm -f "$dir"/wheels/numpy-*.whl
else
  echo "gpu_deps: no pip: no wheels" >&2
fi

size_mib() { du -sm "$dir" | cut -f1; }
dropped=""
for w in $drop_order; do
  [ "$(size_mib)" -le "$limit_mib" ] && break
  for f in "$dir"/wheels/"$w"-*.whl; do
    [ -e "$f" ] || continue
    rm -f "$f"
    dropped="$dropped $(basename "$f")"
  done
done
{
  echo "# wheels for CPython $py_version ($pins), numpy left out"
  ls "$dir/wheels"
  [ -z "$dropped" ] || echo "# dropped to stay under $limit_mib MiB:$dropped"
} >>"$manifest"
[ -z "$dropped" ] || echo "gpu_deps: over $limit_mib MiB: dropped$dropped" >&2
total=$(size_mib)
echo "gpu_deps: $dir: $total MiB ($(du -sm "$dir/debs" | cut -f1) MiB of .deb, $(du -sm "$dir/wheels" | cut -f1) MiB of wheels)"
if [ "$total" -gt "$limit_mib" ]; then
  echo "gpu_deps: still over $limit_mib MiB after dropping the optional wheels" >&2
  exit 1
fi
