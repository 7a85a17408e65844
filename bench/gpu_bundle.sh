#!/usr/bin/env bash
# Prepares, on a machine with the CUDA toolkit (no GPU needed), what
# bench/gpu_check.sh runs when the GPU machine cannot build kiln itself (its
# image may lack the Debian packages of scripts/install-deps.sh): the CUDA
# test binary and the kiln command, built for any x86-64 CPU with AVX2
# (KILN_NATIVE=OFF), stripped, with the shared libraries they need other than
# the C library and the CUDA toolkit's, in one archive.
#
#   bash bench/gpu_bundle.sh [ARCHIVE]    (default ./gpu-bundle.tar.xz, git-ignored)
#
# Carry ARCHIVE to the GPU machine (the device tool's `carry`), then:
#   bash bench/gpu_check.sh OUT_DIR       (it unpacks ARCHIVE when configure fails)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
ARCHIVE=$(realpath -m "${1:-$ROOT/gpu-bundle.tar.xz}")
BUILD=${BUILD:-$ROOT/build-bundle}
JOBS=${JOBS:-2}

# PACK_ONLY=1: package BUILD's binaries as they are (to try the packaging).
if [ "${PACK_ONLY:-0}" != 1 ]; then
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_CUDA=ON -DKILN_NATIVE=OFF \
    -DCMAKE_CXX_FLAGS="-mavx2 -mfma" > /dev/null
  cmake --build "$BUILD" -j "$JOBS" --target test_backend_cuda kiln_cli
fi

STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE/bundle/bin" "$STAGE/bundle/lib"
for exe in test_backend_cuda kiln; do
  strip -o "$STAGE/bundle/bin/$exe" "$BUILD/bin/$exe"
done
# Shared libraries: everything ldd resolves except glibc's own and CUDA's
# (the GPU machine has its driver's and its toolkit's).
for exe in "$STAGE"/bundle/bin/*; do
  ldd "$exe" | awk '$3 ~ /^\// {print $3}'
done | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libmvec.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*|libcuda.so*|libcudart*|libcublas*|libnvrtc*) ;;
    *) cp -L "$lib" "$STAGE/bundle/lib/" ;;
  esac
done
strip --strip-unneeded "$STAGE"/bundle/lib/*.so* 2>/dev/null || true
git -C "$ROOT" rev-parse HEAD > "$STAGE/bundle/COMMIT"
tar -C "$STAGE" -cJf "$ARCHIVE" bundle
echo "wrote $ARCHIVE ($(du -h "$ARCHIVE" | cut -f1)): $(ls "$STAGE/bundle/bin" | tr '\n' ' ')+ $(ls "$STAGE/bundle/lib" | wc -l) libraries"
