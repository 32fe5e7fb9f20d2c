#!/usr/bin/env bash
# llama.cpp as a CPU peer for tools/bench_compare.py: builds its llama-bench
# and converts a Hugging Face checkpoint to GGUF with its own converter.
#
#   tools/llamacpp.sh build                      -> prints the llama-bench path
#   tools/llamacpp.sh version                    -> prints the JSON in VERSION
#   tools/llamacpp.sh convert HF_DIR TYPE OUT    -> writes OUT.gguf (TYPE: f32|f16|bf16|q8_0)
#   tools/llamacpp.sh vocab HF_DIR OUT           -> writes OUT.gguf, the tokenizer and chat template
#                                                   only (convert_hf_to_gguf.py --vocab-only; HF_DIR
#                                                   needs a config.json beside its tokenizer files)
#   tools/llamacpp.sh tokenize GGUF TEXT_FILE [--no-bos]
#                                                -> prints llama-tokenize's ids for the file's bytes
#                                                   as one JSON list (special tokens parsed)
#
# llama.cpp comes from the llama-cpp-python source distribution (pip download
# --no-binary), which vendors it under vendor/llama.cpp with
# convert_hf_to_gguf.py and gguf-py. Everything lives outside the repo in
#   $LLAMACPP_CACHE (default ~/.cache/shardswap/llamacpp/$LLAMACPP_PY_VERSION):
#     src/     the unpacked sdist        build/  CMake build (llama-bench only)
#     venv/    the converter's Python    VERSION JSON: sdist version, vendored commit, CPU flags
# and is reused when present (delete the folder to rebuild).
#
# Environment:
#   LLAMACPP_PY_VERSION  llama-cpp-python release to take llama.cpp from (default below;
#                        pinned so two runs compare the same llama.cpp)
#   LLAMACPP_SDIST       an already-downloaded sdist tarball to use instead of pip download
#   LLAMACPP_PYTHON      interpreter whose site-packages (torch, transformers) the converter's
#                        venv sees (default /root/hf/bin/python if present, else python3)
#   JOBS                 build parallelism (default 2)
# Progress goes to stderr; stdout carries only the answer, so callers can read it.
set -euo pipefail

VERSION_DEFAULT=0.3.36
PYVER=${LLAMACPP_PY_VERSION:-$VERSION_DEFAULT}
CACHE=${LLAMACPP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/shardswap/llamacpp/$PYVER}
JOBS=${JOBS:-2}
if [[ -z ${LLAMACPP_PYTHON:-} ]]; then
    if [[ -x /root/hf/bin/python ]]; then LLAMACPP_PYTHON=/root/hf/bin/python; else LLAMACPP_PYTHON=python3; fi
fi
SRC=$CACHE/src
LL=$SRC/vendor/llama.cpp
BENCH=$CACHE/build/bin/llama-bench

say() { echo "llamacpp.sh: $*" >&2; }
die() { say "$*"; exit 1; }

# fetch_src: unpack the sdist into $SRC once.
fetch_src() {
    [[ -f $LL/CMakeLists.txt ]] && return 0
    mkdir -p "$CACHE"
    local tgz=${LLAMACPP_SDIST:-}
    if [[ -z $tgz ]]; then
        say "downloading the llama-cpp-python $PYVER sdist"
        "$LLAMACPP_PYTHON" -m pip download --quiet --no-binary :all: --no-deps \
            -d "$CACHE/dl" "llama-cpp-python==$PYVER" >&2 ||
            die "pip download llama-cpp-python==$PYVER failed"
        tgz=$CACHE/dl/llama_cpp_python-$PYVER.tar.gz
        [[ -f $tgz ]] || die "no llama_cpp_python-$PYVER.tar.gz after pip download"
    fi
    rm -rf "$SRC.tmp" && mkdir -p "$SRC.tmp"
    tar -xzf "$tgz" -C "$SRC.tmp" --strip-components=1
    [[ -f $SRC.tmp/vendor/llama.cpp/CMakeLists.txt ]] || die "$tgz has no vendor/llama.cpp"
    mv "$SRC.tmp" "$SRC"
}

# vendored_commit: the llama.cpp commit this release vendors, from its CHANGELOG's
# first "update llama.cpp to ggml-org/llama.cpp@HASH" line under the release's heading.
vendored_commit() {
    awk -v v="## [$PYVER]" '$0 == v { on = 1; next } on && /^## \[/ { exit }
        on && match($0, /llama\.cpp@[0-9a-f]+/) { print substr($0, RSTART + 10, RLENGTH - 10); exit }' \
        "$SRC/CHANGELOG.md"
}

build() {
    fetch_src
    if [[ ! -x $BENCH ]]; then
        local commit
        commit=$(vendored_commit)
        say "building llama-bench (llama.cpp ${commit:-unknown}) in $CACHE/build"
        # Only llama-bench: no server, examples, tests, HTTP; static so the binary stands
        # alone; GGML_NATIVE picks this CPU's ISA (AVX2/AVX512/AVX512-BF16...).
        cmake -S "$LL" -B "$CACHE/build" -DCMAKE_BUILD_TYPE=Release \
            -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
            -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
            -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_COMMON=ON \
            -DLLAMA_BUILD_COMMIT="${commit:-unknown}" -DLLAMA_BUILD_NUMBER=0 \
            >"$CACHE/cmake.log" 2>&1 || die "cmake configure failed: see $CACHE/cmake.log"
        cmake --build "$CACHE/build" --target llama-bench -j"$JOBS" >"$CACHE/build.log" 2>&1 ||
            die "build failed: see $CACHE/build.log"
    fi
    [[ -f $CACHE/VERSION ]] || write_version
    echo "$BENCH"
}

# write_version: what was built, for the table's header and the JSON.
write_version() {
    local commit isa
    commit=$(vendored_commit)
    # GGML_NATIVE compiles ggml-cpu with -march=native: the ISA it was given is what the
    # compiler predefines for this CPU (AVX2, AVX512*, AVX512_BF16, AMX...).
    isa=$(${CC:-cc} -march=native -dM -E - </dev/null |
        grep -oE '__(AVX2|AVX512[A-Z0-9_]*|AMX_[A-Z0-9]*|F16C|FMA)__' | tr -d _ | sort -u | tr '\n' ' ')
    printf '{"llama_cpp_python": "%s", "llama_cpp_commit": "%s", "march_native": "%s"}\n' \
        "$PYVER" "${commit:-unknown}" "${isa% }" >"$CACHE/VERSION"
}

# venv: a venv for convert_hf_to_gguf.py that sees $LLAMACPP_PYTHON's packages (torch,
# transformers, numpy) through a .pth file and adds what they lack (sentencepiece, the
# vendored gguf-py's own needs); gguf itself is taken from the vendored gguf-py.
venv() {
    fetch_src
    local py=$CACHE/venv/bin/python
    if [[ ! -x $py ]]; then
        say "making the converter's venv in $CACHE/venv"
        "$LLAMACPP_PYTHON" -m venv "$CACHE/venv" >&2
        local base site
        base=$("$LLAMACPP_PYTHON" -c 'import site; print("\n".join(site.getsitepackages()))')
        site=$("$CACHE/venv/bin/python" -c 'import site; print(site.getsitepackages()[0])')
        echo "$base" >"$site/shardswap-base.pth"
        local need=()
        for m in numpy torch sentencepiece tqdm yaml requests google.protobuf safetensors transformers; do
            "$CACHE/venv/bin/python" -c "import $m" 2>/dev/null || need+=("$m")
        done
        local pkgs=()
        for m in "${need[@]}"; do
            case $m in yaml) pkgs+=(pyyaml) ;; google.protobuf) pkgs+=(protobuf) ;; *) pkgs+=("$m") ;; esac
        done
        if ((${#pkgs[@]})); then
            say "pip install ${pkgs[*]}"
            "$CACHE/venv/bin/python" -m pip install --quiet "${pkgs[@]}" >&2 ||
                { rm -rf "$CACHE/venv"; die "pip install ${pkgs[*]} failed"; }
        fi
    fi
    echo "$py"
}

# convert HF_DIR TYPE OUT: the vendored converter, gguf-py from the sdist (not PyPI's).
convert() {
    local dir=$1 type=$2 out=$3 py
    case $type in f32 | f16 | bf16 | q8_0) ;; *) die "convert: type '$type' is not f32|f16|bf16|q8_0" ;; esac
    [[ -f $dir/config.json ]] || die "$dir: no config.json"
    py=$(venv)
    # GGUF carries the vocabulary, so the converter needs a tokenizer (llama-bench itself
    # feeds random ids); gen-model writes none where data/tokenizer has none of the family
    # (Gemma): such a checkpoint is converted from a folder of links to its files beside a
    # placeholder SentencePiece model, which the converter pads to config.json's vocab_size
    # with unused tokens, so the GGUF keeps every row of the embedding and the head.
    local src=$dir stage=
    if [[ ! -f $dir/tokenizer.json && ! -f $dir/tokenizer.model && ! -f $dir/vocab.json ]]; then
        stage=$(mktemp -d)
        local f
        for f in "$dir"/*; do ln -s "$(realpath "$f")" "$stage/"; done
        say "convert: $dir has no tokenizer: a placeholder SentencePiece vocabulary stands in"
        placeholder_spm "$py" "$stage/tokenizer.model" ||
            { rm -rf "$stage"; die "convert: could not make a placeholder tokenizer for $dir"; }
        src=$stage
    fi
    mkdir -p "$(dirname "$out")"
    PYTHONPATH=$LL/gguf-py "$py" "$LL/convert_hf_to_gguf.py" "$src" --outtype "$type" \
        --outfile "$out.tmp" >&2 ||
        { rm -f "$out.tmp"; [[ -z $stage ]] || rm -rf "$stage"; die "convert_hf_to_gguf.py $dir --outtype $type failed"; }
    [[ -z $stage ]] || rm -rf "$stage"
    mv "$out.tmp" "$out"
    echo "$out"
}

# placeholder_spm PY OUT: a tiny SentencePiece model (unknown, bos, eos, the 256 bytes and
# a few pieces), for a checkpoint converted only to be timed.
placeholder_spm() {
    "$1" - "$2" >&2 <<'PY'
import io, sys
import sentencepiece as spm
text = ["the quick brown fox jumps over the lazy dog %d" % i for i in range(200)]
buf = io.BytesIO()
spm.SentencePieceTrainer.train(sentence_iterator=iter(text), model_writer=buf, vocab_size=300,
                               model_type="bpe", byte_fallback=True, hard_vocab_limit=False,
                               minloglevel=2)
open(sys.argv[1], "wb").write(buf.getvalue())
PY
}

# vocab HF_DIR OUT: the vocabulary-only GGUF of a tokenizer directory.
vocab() {
    local dir=$1 out=$2 py
    [[ -f $dir/config.json ]] || die "$dir: no config.json (the converter picks its model class from it)"
    py=$(venv)
    mkdir -p "$(dirname "$out")"
    PYTHONPATH=$LL/gguf-py "$py" "$LL/convert_hf_to_gguf.py" "$dir" --vocab-only \
        --outfile "$out.tmp" >&2 || { rm -f "$out.tmp"; die "convert_hf_to_gguf.py $dir --vocab-only failed"; }
    mv "$out.tmp" "$out"
    echo "$out"
}

# tokenize GGUF FILE [--no-bos]: llama.cpp's own tokenizer on FILE's bytes.
tokenize() {
    local tok=$CACHE/build/bin/llama-tokenize
    [[ -x $tok ]] || die "no $tok: build llama.cpp's tools first"
    "$tok" -m "$1" -f "$2" --ids --log-disable ${3:+"$3"} 2>/dev/null
}

case ${1:-} in
build) build ;;
version) build >/dev/null && cat "$CACHE/VERSION" ;;
venv) venv ;;
convert)
    (($# == 4)) || die "usage: $0 convert HF_DIR f32|f16|bf16|q8_0 OUT.gguf"
    convert "$2" "$3" "$4"
    ;;
vocab)
    (($# == 3)) || die "usage: $0 vocab HF_DIR OUT.gguf"
    vocab "$2" "$3"
    ;;
tokenize)
    (($# == 3 || $# == 4)) || die "usage: $0 tokenize GGUF TEXT_FILE [--no-bos]"
    tokenize "$2" "$3" "${4:-}"
    ;;
*) die "usage: $0 build | version | venv | convert HF_DIR TYPE OUT.gguf | vocab HF_DIR OUT.gguf | tokenize GGUF FILE [--no-bos]" ;;
esac
