#!/usr/bin/env bash
# Installs the Debian 12 packages kiln needs to build and test. Idempotent:
# packages already present are skipped; what is installed is printed.
#   scripts/install-deps.sh [--fuzz]   (--fuzz: also clang and libFuzzer, for make fuzz)
set -euo pipefail

# package                  why
PACKAGES=(
  build-essential          # g++ 12 (C++20) and make
  cmake                    # build system
  ninja-build              # build tool used by CMake
  pkg-config               # locating libraries
  libopenblas-openmp-dev   # OpenBLAS (OpenMP build): the reference GEMM in bench/gemm, as PyTorch on Debian uses
  libdnnl-dev              # oneDNN: the CPU matrix products (chosen by bench/gemm)
  libblis-dev              # BLIS: measured against oneDNN and OpenBLAS in bench/gemm
  libxbyak-dev             # x86-64 assembler: the CPU backend's compiled fused loops
  nlohmann-json3-dev       # JSON: config files, metrics, golden files
  libpcre2-dev             # regexes for tokenizer pre-tokenizers (GPT-2 pattern)
  libsentencepiece-dev     # spiece.model (SentencePiece) tokenizers
  libicu-dev               # Unicode normalization, categories, graphemes for tokenizers
  libgtest-dev             # unit tests
  libgmock-dev             # unit tests
  libopenmpi-dev           # MPI: data-parallel replicas across processes and hosts
  zlib1g-dev               # .gz data files
  libzstd-dev              # .zst data files
  openmpi-bin              # mpirun, to launch them
  time                     # GNU time: peak memory per process in bench/replicas
)
if [ "${1:-}" = "--fuzz" ]; then
  PACKAGES+=(
    clang                  # clang 14: the fuzz targets (make fuzz)
    libclang-rt-dev        # libFuzzer and clang's sanitizer runtimes
    libomp-dev             # OpenMP for clang
  )
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "install-deps: done"
