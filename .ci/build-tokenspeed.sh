#!/usr/bin/env bash
# Build TokenSpeed's scheduler extension (tokenspeed_scheduler, a nanobind C++ module) into a
# wheel, from its sources: nothing but the package index is needed.
#
# usage: .ci/build-tokenspeed.sh <source dir> <wheel out dir>
#   <source dir>: a tokenspeed checkout or its tokenspeed-scheduler/ folder.
#   Needs a C++20 compiler (g++ >= 11) and OpenSSL headers (libssl-dev); cmake, ninja,
#   scikit-build-core and nanobind come from pip (an isolated build). spdlog comes from the
#   header-only `tokenspeed-spdlog` wheel: the radix era's CMakeLists.txt would git-clone it,
#   which FETCHCONTENT_TRY_FIND_PACKAGE_MODE=ALWAYS with spdlog_DIR short-circuits.
#   ccache, when on PATH, is the compiler launcher (other revisions rebuild in about a minute).
set -euo pipefail
SRC=$(realpath "${1:?usage: build-tokenspeed.sh <source dir> <wheel out dir>}")
OUT=$(realpath -m "${2:?usage: build-tokenspeed.sh <source dir> <wheel out dir>}")
[ -d "$SRC/tokenspeed-scheduler" ] && SRC="$SRC/tokenspeed-scheduler"
if [ ! -f "$SRC/pyproject.toml" ] || [ ! -f "$SRC/CMakeLists.txt" ]; then
    echo "build-tokenspeed: not a tokenspeed-scheduler source folder: $SRC" >&2
    exit 2
fi
if [ ! -f /usr/include/openssl/sha.h ]; then
    echo "build-tokenspeed: OpenSSL headers missing (install libssl-dev or openssl-devel)" >&2
    exit 2
fi
command -v c++ >/dev/null || { echo "build-tokenspeed: no C++ compiler (g++ >= 11)" >&2; exit 2; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/kvconf-tsbuild.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
python3 -m venv "$WORK/venv"
"$WORK/venv/bin/pip" install -q --upgrade pip
"$WORK/venv/bin/pip" install -q "tokenspeed-spdlog==1.15.1"
SPDLOG=$("$WORK/venv/bin/python" -c \
    'import tokenspeed_spdlog; print(tokenspeed_spdlog.cmake_prefix_path())')/cmake
CFG=(
    -Cbuild-dir="$WORK/build"
    -Ccmake.define.FETCHCONTENT_TRY_FIND_PACKAGE_MODE=ALWAYS
    -Ccmake.define.FETCHCONTENT_FULLY_DISCONNECTED=ON
    -Ccmake.define.spdlog_DIR="$SPDLOG"
    -Ccmake.build-type="${BUILD_TYPE:-Release}"
)
if command -v ccache >/dev/null; then
    CFG+=(-Ccmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache)
    export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$(dirname "$SRC")}"
fi
mkdir -p "$OUT"
export CMAKE_BUILD_PARALLEL_LEVEL="${JOBS:-$(nproc)}"
"$WORK/venv/bin/pip" wheel -q --no-deps -w "$OUT" "${CFG[@]}" "$SRC"
ls -t "$OUT"/tokenspeed_scheduler-*.whl | head -1
