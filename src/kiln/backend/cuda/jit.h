#pragma once
// Kernels compiled at run time. NVRTC turns a translation unit (codegen.h)
// into machine code for the device's architecture, with kiln's shared
// headers (embedded in the library) as its only includes. The machine code is
// cached on disk -- KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else
// ~/.cache/kiln; KILN_CACHE_DIR=off turns the disk cache off -- and loaded
// modules in memory, so a plan's kernels are compiled once per machine.
#include <filesystem>
#include <memory>
#include <string>

namespace kiln::backend::cuda {

// NVRTC: the CUBIN of `tu` for sm_<arch> (90: H100/H200). Throws kiln::Error
// with NVRTC's log. Needs no GPU.
std::string compile_cubin(const std::string& tu, int arch);

// The disk cache's folder for CUDA kernels; empty when it is off.
std::filesystem::path jit_cache_dir();

// A module loaded on one device; never unloaded (held by the memory cache).
// (No CUDA types here: the host tests include this header.)
class JitModule {
 public:
  explicit JitModule(void* library) : library_(library) {}
  // The kernel `name` (a cudaKernel_t) for cudaLaunchKernel. Throws if absent.
  const void* kernel(const std::string& name) const;

 private:
  void* library_;  // cudaLibrary_t
};

struct JitStats {
  int compiled = 0, from_disk = 0, from_memory = 0;  // modules
  int kernels = 0;                                   // in the modules compiled or read from disk
  double compile_seconds = 0;
};

// The module of `tu` on `device`: from memory, else from the disk cache,
// else compiled (and written to the disk cache atomically).
// `kernels`: how many the unit defines (for the statistics).
std::shared_ptr<const JitModule> load_module(const std::string& tu, int device, int kernels);

// How the modules loaded so far were found (this process).
JitStats jit_stats();

}  // namespace kiln::backend::cuda
