#!/usr/bin/env bash
# Build llama.cpp's own `llama-server` and `rpc-server` (MIT licence) from the source
# vendored in the llama-cpp-python 0.3.36 sdist, so bench/concurrency.py and
# bench/distributed.py can compare Skulk against them on the same engine version.
# Output: bench/.build/bin/llama-server and bench/.build/bin/ggml-rpc-server.
#
# Usage: bench/build_llama_server.sh            (uses the uv cache, else pip download)
#        LLAMA_CPP_SRC=/path/to/llama.cpp bench/build_llama_server.sh
#        BUILD_JOBS=4 bench/build_llama_server.sh
set -euo pipefail

VERSION="0.3.36"
BENCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BUILD_DIR="${BENCH_DIR}/.build"
JOBS="${BUILD_JOBS:-2}"
# The default -march=native build compiles Intel AMX kernels that die with SIGILL
# on VMs whose CPU advertises AMX without the kernel enabling tile state; the
# runner's llama-cpp-python is built the same way (see pyproject.toml).
NO_AMX="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"

find_source() {
    if [[ -n "${LLAMA_CPP_SRC:-}" ]]; then
        echo "${LLAMA_CPP_SRC}"
        return
    fi
    # An existing build dir is tied to the source it was configured from; reuse it.
    local configured
    configured="$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "${BUILD_DIR}/CMakeCache.txt" 2>/dev/null || true)"
    if [[ -n "${configured}" && -f "${configured}/CMakeLists.txt" ]]; then
        echo "${configured}"
        return
    fi
    local cache="${UV_CACHE_DIR:-${HOME}/.cache/uv}"
    local candidate
    for candidate in "${cache}"/sdists-v*/pypi/llama-cpp-python/"${VERSION}"/*/src/vendor/llama.cpp; do
        if [[ -f "${candidate}/tools/server/CMakeLists.txt" ]]; then
            echo "${candidate}"
            return
        fi
    done
    local dl="${BUILD_DIR}/sdist"
    if [[ ! -d "${dl}/llama_cpp_python-${VERSION}" ]]; then
        mkdir -p "${dl}"
        python3 -m pip download --quiet --no-deps --no-binary :all: \
            "llama-cpp-python==${VERSION}" -d "${dl}" >&2
        tar -xzf "${dl}/llama_cpp_python-${VERSION}.tar.gz" -C "${dl}"
    fi
    echo "${dl}/llama_cpp_python-${VERSION}/vendor/llama.cpp"
}

SRC="$(find_source)"
echo "llama.cpp source: ${SRC}"

CFLAGS="${NO_AMX}" CXXFLAGS="${NO_AMX}" cmake -S "${SRC}" -B "${BUILD_DIR}" -G Ninja \
    -DCMAKE_BUILD_TYPE=Release \
    -DGGML_NATIVE=ON \
    -DLLAMA_BUILD_SERVER=ON \
    -DLLAMA_BUILD_TOOLS=ON \
    -DLLAMA_BUILD_COMMON=ON \
    -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_APP=OFF \
    -DLLAMA_CURL=OFF \
    -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_UI=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF \
    -DGGML_RPC=ON \
    -DBUILD_SHARED_LIBS=OFF

cmake --build "${BUILD_DIR}" --target llama-server ggml-rpc-server -j "${JOBS}"
echo "built: ${BUILD_DIR}/bin/llama-server ${BUILD_DIR}/bin/ggml-rpc-server"
"${BUILD_DIR}/bin/llama-server" --version || true
