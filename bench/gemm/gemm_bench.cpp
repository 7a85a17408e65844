// bench_gemm: fp32 GEMM libraries at BERT-base training shapes.
//
// Compares OpenBLAS (OpenMP build), oneDNN (dnnl_sgemm) and BLIS (OpenMP
// build), each dlopen()ed with RTLD_LOCAL (see gemm_libs.cpp), on the GEMMs of
// one BERT-base encoder layer, forward and backward, batch 8 x sequence 128.
// Every library runs on this process's libgomp thread pool with the same
// thread count. Every result is checked against a float64 reference on
// sampled entries, for unwritten (NaN) entries, and against the other
// libraries, so a misconfigured call cannot look fast.
//
// See README.md in this directory for results and the recommendation.

#include "gemm_libs.hpp"

#include <omp.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace gb = gemm_bench;

namespace {

// ---- problem description ----------------------------------------------------

// Row-major C[M,N] = op(A) op(B), `batch` independent problems stored back to
// back. ta: A is stored [K,M]; tb: B is stored [N,K] (PyTorch weight layout).
struct Shape {
  const char* name;
  int M, N, K;
  bool ta, tb;
  int batch;      // 1 = plain GEMM
  int per_layer;  // occurrences per encoder layer (forward + backward)
  bool lm_head;   // optional, large
};

// BERT-base: tokens T = 8*128 = 1024, hidden 768, FFN 3072, 12 heads x 64,
// attention batch 8*12 = 96. Weights are [out, in] as in torch.nn.Linear.
const std::vector<Shape> kShapes = {
    // Linear layers: Y = X W^T, dX = dY W, dW = dY^T X.
    {"qkv/out fwd     X.W^T", 1024, 768, 768, false, true, 1, 4, false},
    {"qkv/out bwd-d   dY.W", 1024, 768, 768, false, false, 1, 4, false},
    {"qkv/out bwd-w   dY^T.X", 768, 768, 1024, true, false, 1, 4, false},
    {"ffn-up fwd      X.W1^T", 1024, 3072, 768, false, true, 1, 1, false},
    {"ffn-up bwd-d    dY.W1", 1024, 768, 3072, false, false, 1, 1, false},
    {"ffn-up bwd-w    dY^T.X", 3072, 768, 1024, true, false, 1, 1, false},
    {"ffn-down fwd    H.W2^T", 1024, 768, 3072, false, true, 1, 1, false},
    {"ffn-down bwd-d  dY.W2", 1024, 3072, 768, false, false, 1, 1, false},
    {"ffn-down bwd-w  dY^T.H", 768, 3072, 1024, true, false, 1, 1, false},
    // Attention, 96 x per (batch, head). S = Q K^T and dP = dO V^T share the
    // NT shape; O = P V and dQ = dS K share the NN shape; dV = P^T dO and
    // dK = dS^T Q are the TN shape.
    {"attn Q.K^T      (x96)", 128, 128, 64, false, true, 96, 2, false},
    {"attn P.V        (x96)", 128, 64, 128, false, false, 96, 2, false},
    {"attn P^T.dO     (x96)", 128, 64, 128, true, false, 96, 2, false},
    // Vocabulary projection (MLM head); once per model, not per layer.
    {"lm-head fwd     X.E^T", 1024, 30522, 768, false, true, 1, 0, true},
};

enum class Mode { kPlain, kBatchLoop, kBatchOmp };

const char* mode_tag(Mode m) {
  switch (m) {
    case Mode::kPlain: return "";
    case Mode::kBatchLoop: return " loop";
    case Mode::kBatchOmp: return " omp";
  }
  return "";
}

double gflop(const Shape& s) {
  return 2.0 * s.M * s.N * double(s.K) * s.batch * 1e-9;
}

// ---- buffers ----------------------------------------------------------------

struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};
using Buf = std::unique_ptr<float[], FreeDeleter>;

Buf alloc_floats(size_t n) {
  size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
  auto* p = static_cast<float*>(std::aligned_alloc(64, bytes));
  if (!p) {
    std::fprintf(stderr, "out of memory (%zu bytes)\n", bytes);
    std::exit(2);
  }
  return Buf(p);
}

uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void fill_uniform(float* p, size_t n, uint64_t seed) {
  for (size_t i = 0; i < n; ++i)
    p[i] = float(double(splitmix(seed) >> 11) * 0x1.0p-52 - 1.0);  // [-1, 1)
}

struct Problem {
  Shape s;
  int lda, ldb, ldc;
  size_t a_elems, b_elems, c_elems;  // per batch entry
  Buf A, B, C, Cx;                   // Cx: first library's result
  bool have_cx = false;

  explicit Problem(const Shape& sh) : s(sh) {
    lda = s.ta ? s.M : s.K;
    ldb = s.tb ? s.K : s.N;
    ldc = s.N;
    a_elems = size_t(s.M) * s.K;
    b_elems = size_t(s.K) * s.N;
    c_elems = size_t(s.M) * s.N;
    A = alloc_floats(a_elems * s.batch);
    B = alloc_floats(b_elems * s.batch);
    C = alloc_floats(c_elems * s.batch);
    Cx = alloc_floats(c_elems * s.batch);
    fill_uniform(A.get(), a_elems * s.batch, 0x1234u + uint64_t(s.M) * 7 + s.K);
    fill_uniform(B.get(), b_elems * s.batch, 0x9876u + uint64_t(s.N) * 13 + s.K);
    std::memset(C.get(), 0, c_elems * s.batch * sizeof(float));
  }
  float a(int b, int i, int k) const {
    const float* p = A.get() + b * a_elems;
    return s.ta ? p[size_t(k) * lda + i] : p[size_t(i) * lda + k];
  }
  float bm(int b, int k, int j) const {
    const float* p = B.get() + b * b_elems;
    return s.tb ? p[size_t(j) * ldb + k] : p[size_t(k) * ldb + j];
  }
};

// ---- running ----------------------------------------------------------------

struct Config {
  int threads = 0;
  int min_reps = 7;
  int max_reps = 60;
  double target_s = 0.25;  // aim for this much timed work per measurement
  bool lm_head = true;
  std::vector<std::string> only;
};

// One call of the whole problem (all batch entries). Returns false if the
// library reported an error.
bool run_once(const gb::Backend& be, Problem& p, Mode mode, int threads) {
  const Shape& s = p.s;
  if (mode != Mode::kBatchOmp) {
    bool ok = true;
    for (int b = 0; b < s.batch; ++b)
      ok &= be.sgemm(be, s.ta, s.tb, s.M, s.N, s.K, p.A.get() + b * p.a_elems,
                     p.lda, p.B.get() + b * p.b_elems, p.ldb,
                     p.C.get() + b * p.c_elems, p.ldc);
    return ok;
  }
  // One OpenMP loop over the batch, the library single-threaded inside it.
  // OpenBLAS (OpenMP build) and oneDNN detect omp_in_parallel() and run on
  // one thread; BLIS is told explicitly, per thread.
  int errors = 0;
#pragma omp parallel num_threads(threads) reduction(+ : errors)
  {
    if (be.name == "BLIS") be.set_threads(be, 1);
#pragma omp for schedule(static)
    for (int b = 0; b < s.batch; ++b)
      errors += !be.sgemm(be, s.ta, s.tb, s.M, s.N, s.K,
                          p.A.get() + b * p.a_elems, p.lda,
                          p.B.get() + b * p.b_elems, p.ldb,
                          p.C.get() + b * p.c_elems, p.ldc);
  }
  if (be.name == "BLIS") be.set_threads(be, threads);
  return errors == 0;
}

using Clock = std::chrono::steady_clock;

double seconds_once(const gb::Backend& be, Problem& p, Mode mode, int threads,
                    bool& ok) {
  auto t0 = Clock::now();
  ok &= run_once(be, p, mode, threads);
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct Timing {
  double median = 0, q1 = 0, q3 = 0;
  int reps = 0;
  bool ok = true;
};

// Times every available library on one problem. The timed calls are
// interleaved round-robin (library order rotated every round), so a burst of
// load from elsewhere on the machine hits all libraries alike instead of
// whichever happened to be running then.
std::vector<Timing> measure_row(const std::vector<gb::Backend>& libs, Problem& p,
                                Mode mode, int threads, const Config& cfg,
                                size_t rotate) {
  const size_t n = libs.size();
  std::vector<Timing> t(n);
  std::vector<std::vector<double>> v(n);
  // Warm-up, 2 calls each: JIT (oneDNN), packing buffers, page faults, pool.
  double per_round = 0;
  for (size_t l = 0; l < n; ++l) {
    if (!libs[l].available) continue;
    seconds_once(libs[l], p, mode, threads, t[l].ok);
    per_round += seconds_once(libs[l], p, mode, threads, t[l].ok);
  }
  int reps = int(std::ceil(cfg.target_s * double(n) / std::max(per_round, 1e-6)));
  reps = std::clamp(reps, cfg.min_reps, std::max(cfg.min_reps, cfg.max_reps));
  for (int r = 0; r < reps; ++r)
    for (size_t k = 0; k < n; ++k) {
      size_t l = (k + r + rotate) % n;
      if (libs[l].available)
        v[l].push_back(seconds_once(libs[l], p, mode, threads, t[l].ok));
    }
  for (size_t l = 0; l < n; ++l) {
    if (v[l].empty()) continue;
    auto& x = v[l];
    std::sort(x.begin(), x.end());
    const size_t m = x.size();
    t[l].reps = int(m);
    t[l].median = m % 2 ? x[m / 2] : 0.5 * (x[m / 2 - 1] + x[m / 2]);
    t[l].q1 = x[m / 4];
    t[l].q3 = x[(3 * m) / 4];
  }
  return t;
}

struct Check {
  double sample_err = 0;  // max |c - ref| / sum|a*b| over sampled entries
  double cross_diff = 0;  // max |c - c_first| / max |c_first|, full matrix
  size_t non_finite = 0;  // entries not written (NaN sentinel) or inf
  bool call_ok = true;
  bool pass() const {
    return call_ok && non_finite == 0 && sample_err < 1e-4 && cross_diff < 1e-4;
  }
};

// Recomputes C once (pre-filled with NaN so unwritten entries show) and checks it.
Check verify(const gb::Backend& be, Problem& p, Mode mode, int threads) {
  Check c;
  const Shape& s = p.s;
  const size_t n = p.c_elems * s.batch;
  std::fill_n(p.C.get(), n, std::numeric_limits<float>::quiet_NaN());
  c.call_ok = run_once(be, p, mode, threads);
  for (size_t i = 0; i < n; ++i) c.non_finite += !std::isfinite(p.C[i]);

  // float64 reference on sampled entries (always including the corners).
  uint64_t seed = 0xC0FFEEu + uint64_t(s.M) * 31 + s.N;
  const int samples = 768;
  for (int t = 0; t < samples; ++t) {
    int b, i, j;
    if (t < 4) {
      b = t % 2 ? s.batch - 1 : 0;
      i = t < 2 ? 0 : s.M - 1;
      j = t % 2 ? s.N - 1 : 0;
    } else {
      b = int(splitmix(seed) % uint64_t(s.batch));
      i = int(splitmix(seed) % uint64_t(s.M));
      j = int(splitmix(seed) % uint64_t(s.N));
    }
    double ref = 0, mag = 0;
    for (int k = 0; k < s.K; ++k) {
      double prod = double(p.a(b, i, k)) * double(p.bm(b, k, j));
      ref += prod;
      mag += std::fabs(prod);
    }
    double got = p.C[b * p.c_elems + size_t(i) * p.ldc + j];
    double err = std::isfinite(got) ? std::fabs(got - ref) / std::max(mag, 1e-30)
                                    : std::numeric_limits<double>::infinity();
    c.sample_err = std::max(c.sample_err, err);
  }

  // Against the first library that produced a (passing) result.
  if (!p.have_cx) {
    if (c.call_ok && c.non_finite == 0 && c.sample_err < 1e-4) {
      std::memcpy(p.Cx.get(), p.C.get(), n * sizeof(float));
      p.have_cx = true;
    }
  } else {
    double dmax = 0, xmax = 0;
    for (size_t i = 0; i < n; ++i) {
      double d = std::fabs(double(p.C[i]) - double(p.Cx[i]));
      dmax = std::max(dmax, d);  // NaNs are counted in non_finite
      xmax = std::max(xmax, std::fabs(double(p.Cx[i])));
    }
    c.cross_diff = dmax / std::max(xmax, 1e-30);
  }
  return c;
}

// ---- load from elsewhere -----------------------------------------------------

// CPU time used on the whole machine by everything except this process
// (plus hypervisor steal), as a fraction of the machine, between two
// snapshots. Makes runs disturbed by other people's compiles recognisable.
struct CpuSnap {
  double busy_s = 0, steal_s = 0, self_s = 0, wall_s = 0;
  bool ok = false;
};

CpuSnap cpu_snap() {
  CpuSnap c;
  std::ifstream f("/proc/stat");
  std::string tag;
  unsigned long long user = 0, nice = 0, sys = 0, idle = 0, iowait = 0, irq = 0, softirq = 0,
                     steal = 0;
  if (f >> tag >> user >> nice >> sys >> idle >> iowait >> irq >> softirq >> steal && tag == "cpu") {
    const double hz = double(sysconf(_SC_CLK_TCK));
    c.busy_s = double(user + nice + sys + irq + softirq) / hz;
    c.steal_s = double(steal) / hz;
    c.ok = true;
  }
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  c.self_s = double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
             1e-6 * double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
  c.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  return c;
}

// Fraction of the machine's CPUs taken by others between a and b; -1 if unknown.
double other_load(const CpuSnap& a, const CpuSnap& b) {
  const double wall = b.wall_s - a.wall_s;
  const long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  if (!a.ok || !b.ok || wall <= 0 || ncpu <= 0) return -1;
  double other = (b.busy_s - a.busy_s) - (b.self_s - a.self_s) + (b.steal_s - a.steal_s);
  return std::clamp(other / (wall * double(ncpu)), 0.0, 1.0);
}

struct Cell {
  bool ran = false;
  Timing t;
  Check c;
};

// Sets every library (and this thread's OpenMP ICV, used by oneDNN) to n threads.
void set_all_threads(std::vector<gb::Backend>& libs, int n) {
  for (auto& be : libs)
    if (be.available) be.set_threads(be, n);
  omp_set_num_threads(n);
}

std::string fmt_gflops(const Cell& c, const Shape& s) {
  if (!c.ran) return "n/a";
  if (!c.c.pass()) return "FAIL";
  char buf[32];
  double g = gflop(s) / c.t.median;
  bool noisy = (c.t.q3 - c.t.q1) / c.t.median > 0.10;
  std::snprintf(buf, sizeof buf, "%.1f%s", g, noisy ? "~" : "");
  return buf;
}

void usage() {
  std::printf(
      "usage: bench_gemm [--threads N] [--min-reps N] [--target-ms MS] [--no-lm-head]\n"
      "                  [--only LIB[,LIB...]] [--quick]\n"
      "  --threads N     threads for every library (default: all cores, omp_get_num_procs)\n"
      "  --min-reps N    minimum timed repetitions per measurement (default 7, min 5)\n"
      "  --target-ms MS  timed work per measurement; more reps for fast shapes (default 250)\n"
      "  --no-lm-head    skip the 1024x30522x768 vocabulary projection\n"
      "  --only LIBS     subset of OpenBLAS,oneDNN,BLIS (case-insensitive)\n"
      "  --quick         --min-reps 5 --target-ms 100 --no-lm-head\n"
      "library paths: KILN_BENCH_OPENBLAS, KILN_BENCH_ONEDNN, KILN_BENCH_BLIS\n");
}

bool iequals(const std::string& a, const std::string& b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower((unsigned char)x) == std::tolower((unsigned char)y);
         });
}

const char* env_or_unset(const char* v) {
  const char* e = std::getenv(v);
  return e ? e : "unset";
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) { usage(); std::exit(1); }
      return argv[++i];
    };
    if (a == "--threads") cfg.threads = std::atoi(next());
    else if (a == "--min-reps") cfg.min_reps = std::max(5, std::atoi(next()));
    else if (a == "--target-ms") cfg.target_s = std::atof(next()) * 1e-3;
    else if (a == "--no-lm-head") cfg.lm_head = false;
    else if (a == "--quick") { cfg.min_reps = 5; cfg.target_s = 0.1; cfg.lm_head = false; }
    else if (a == "--only") {
      std::string list = next();
      size_t pos = 0;
      while (pos <= list.size()) {
        size_t e = list.find(',', pos);
        if (e == std::string::npos) e = list.size();
        if (e > pos) cfg.only.push_back(list.substr(pos, e - pos));
        pos = e + 1;
      }
    } else if (a == "-h" || a == "--help") { usage(); return 0; }
    else { std::fprintf(stderr, "unknown argument %s\n", a.c_str()); usage(); return 1; }
  }
  if (cfg.threads <= 0) cfg.threads = omp_get_num_procs();
  const int T = cfg.threads;
  auto t_start = Clock::now();

  std::vector<gb::Backend> libs = gb::load_backends(gb::default_library_paths());
  if (!cfg.only.empty())
    for (auto& be : libs)
      if (std::none_of(cfg.only.begin(), cfg.only.end(),
                       [&](const std::string& o) { return iequals(o, be.name); })) {
        be.available = false;
        be.why_unavailable = "not selected (--only)";
      }
  if (gb::blas_in_global_scope())
    std::fprintf(stderr, "warning: a BLAS is visible in the global symbol scope; "
                         "dlopen()ed libraries may call into it\n");

  set_all_threads(libs, T);

  std::printf("bench_gemm: fp32 row-major C[M,N] = op(A).op(B), BERT-base batch 8 x seq 128\n");
  std::printf("threads: %d for every library (omp_get_num_procs=%d, omp_get_max_threads=%d; "
              "OMP_NUM_THREADS=%s, OMP_PROC_BIND=%s, OMP_WAIT_POLICY=%s)\n",
              T, omp_get_num_procs(), omp_get_max_threads(), env_or_unset("OMP_NUM_THREADS"),
              env_or_unset("OMP_PROC_BIND"), env_or_unset("OMP_WAIT_POLICY"));
  int n_avail = 0;
  for (auto& be : libs) {
    if (be.available) {
      ++n_avail;
      int r = be.get_threads(be);
      std::printf("  %-8s threads=%s  %s\n", be.name.c_str(),
                  r < 0 ? "omp" : std::to_string(r).c_str(), be.detail.c_str());
    } else {
      std::printf("  %-8s unavailable: %s\n", be.name.c_str(), be.why_unavailable.c_str());
    }
  }
  if (n_avail == 0) return 1;
  std::printf("timing: 2 warm-up calls, then median of >= %d timed calls (~%.0f ms of work each),\n"
              "        libraries interleaved call by call;\n"
              "        GFLOP/s = 2*M*N*K*batch / median; '~' = interquartile range > 10%% of median\n"
              "op: op(A)op(B), N = as stored, T = transposed; x96 rows: 'loop' = library threaded,\n"
              "    one call per batch entry; 'omp' = omp parallel for over the batch, library 1 thread\n"
              "other load: CPU taken by other processes + hypervisor steal while the row was timed\n\n",
              cfg.min_reps, cfg.target_s * 1e3);
  std::fflush(stdout);

  // Rows: each shape (plain), batched shapes in both modes.
  struct Row {
    const Shape* s;
    Mode mode;
    std::vector<Cell> cells;
  };
  std::vector<Row> rows;
  bool all_pass = true;
  double row_load = -1;  // other_load() during the last run_row's timing
  int disturbed_rows = 0;
  const CpuSnap run_start = cpu_snap();

  auto header = [&](const char* title) {
    std::printf("%s\n", title);
    std::printf("%-28s %17s %2s %6s |", "shape", "M x N x K", "op", "GFLOP");
    for (auto& be : libs) std::printf(" %9s", be.name.c_str());
    std::printf(" | %-13s | %s\n", "best", "other load");
    int width = 28 + 1 + 17 + 1 + 2 + 1 + 6 + 2 + 10 * int(libs.size()) + 3 + 13 + 3 + 10;
    std::printf("%s\n", std::string(width, '-').c_str());
  };
  auto print_row = [&](const Shape& s, Mode mode, const std::vector<Cell>& cells) {
    char dims[40];
    std::snprintf(dims, sizeof dims, "%dx%dx%d", s.M, s.N, s.K);
    std::string name = std::string(s.name) + mode_tag(mode);
    std::printf("%-28s %17s %c%c %6.2f |", name.c_str(), dims, s.ta ? 'T' : 'N',
                s.tb ? 'T' : 'N', gflop(s));
    int best = -1;
    for (size_t l = 0; l < libs.size(); ++l) {
      std::printf(" %9s", fmt_gflops(cells[l], s).c_str());
      if (cells[l].ran && cells[l].c.pass() &&
          (best < 0 || cells[l].t.median < cells[best].t.median))
        best = int(l);
    }
    if (best >= 0) {
      // Margin over the runner-up.
      double second = 0;
      for (size_t l = 0; l < libs.size(); ++l)
        if (int(l) != best && cells[l].ran && cells[l].c.pass())
          second = std::max(second, gflop(s) / cells[l].t.median);
      double g = gflop(s) / cells[best].t.median;
      if (second > 0)
        std::printf(" | %-8s %4s", libs[best].name.c_str(),
                    ("+" + std::to_string(int(std::lround(100.0 * (g / second - 1)))) + "%").c_str());
      else
        std::printf(" | %-13s", libs[best].name.c_str());
    } else {
      std::printf(" | %-13s", "-");
    }
    if (row_load < 0) std::printf(" |    ?\n");
    else std::printf(" | %3.0f%%%s\n", 100.0 * row_load, row_load > 0.10 ? "  disturbed" : "");
    std::fflush(stdout);
  };

  auto run_row = [&](Problem& p, Mode mode, int threads, size_t rotate) {
    std::vector<Cell> cells(libs.size());
    CpuSnap before = cpu_snap();
    std::vector<Timing> t = measure_row(libs, p, mode, threads, cfg, rotate);
    row_load = other_load(before, cpu_snap());
    if (row_load > 0.10) ++disturbed_rows;
    for (size_t k = 0; k < libs.size(); ++k) {
      size_t l = (k + rotate) % libs.size();  // rotate: no fixed reference library
      if (!libs[l].available) continue;
      cells[l].ran = true;
      cells[l].t = t[l];
      cells[l].c = verify(libs[l], p, mode, threads);
      cells[l].c.call_ok &= t[l].ok;
      all_pass &= cells[l].c.pass();
    }
    return cells;
  };

  header(("all cores: " + std::to_string(T) + " threads per library").c_str());
  size_t rot = 0;
  const Shape* largest = nullptr;
  for (const Shape& s : kShapes) {
    if (s.lm_head && !cfg.lm_head) continue;
    if (!largest || gflop(s) > gflop(*largest)) largest = &s;
    Problem p(s);
    if (s.batch == 1) {
      rows.push_back({&s, Mode::kPlain, run_row(p, Mode::kPlain, T, rot++)});
      print_row(s, Mode::kPlain, rows.back().cells);
    } else {
      for (Mode m : {Mode::kBatchLoop, Mode::kBatchOmp}) {
        rows.push_back({&s, m, run_row(p, m, T, rot++)});
        print_row(s, m, rows.back().cells);
      }
    }
  }

  // Single thread, largest shapes.
  std::printf("\n");
  set_all_threads(libs, 1);
  {
    std::vector<const Shape*> st;
    for (const Shape& s : kShapes)
      if (std::string(s.name).rfind("ffn-up fwd", 0) == 0) st.push_back(&s);
    if (largest && largest != st.front()) st.push_back(largest);
    header("single thread (every library set to 1 thread)");
    for (const Shape* s : st) {
      Problem p(*s);
      auto cells = run_row(p, Mode::kPlain, 1, rot++);
      print_row(*s, Mode::kPlain, cells);
      // Parallel speed-up against the all-cores row.
      for (auto& r : rows)
        if (r.s == s) {
          std::printf("%-28s %17s %2s %6s |", "  speed-up with all cores", "", "", "");
          for (size_t l = 0; l < libs.size(); ++l) {
            if (cells[l].ran && r.cells[l].ran && cells[l].c.pass() && r.cells[l].c.pass()) {
              char b[16];
              std::snprintf(b, sizeof b, "%.2fx", cells[l].t.median / r.cells[l].t.median);
              std::printf(" %9s", b);
            } else {
              std::printf(" %9s", "-");
            }
          }
          std::printf(" |\n");
        }
    }
  }
  set_all_threads(libs, T);

  // Verification table.
  std::printf("\nverification: sampled max |c-ref|/sum|a*b| vs float64 (768 entries) / "
              "full-matrix max|c-c0|/max|c0| vs the first library run\n");
  std::printf("%-28s |", "shape");
  for (auto& be : libs) std::printf(" %19s", be.name.c_str());
  std::printf("\n");
  for (auto& r : rows) {
    std::printf("%-28s |", (std::string(r.s->name) + mode_tag(r.mode)).c_str());
    for (size_t l = 0; l < libs.size(); ++l) {
      const Cell& c = r.cells[l];
      if (!c.ran) { std::printf(" %19s", "n/a"); continue; }
      char b[64];
      if (!c.c.call_ok) std::snprintf(b, sizeof b, "CALL FAILED");
      else if (c.c.non_finite) std::snprintf(b, sizeof b, "%zu unwritten", c.c.non_finite);
      else std::snprintf(b, sizeof b, "%.1e/%.1e%s", c.c.sample_err, c.c.cross_diff,
                         c.c.pass() ? "" : "!");
      std::printf(" %19s", b);
    }
    std::printf("\n");
  }
  std::printf("verification: %s\n", all_pass ? "all results correct" : "FAILURES (marked FAIL above)");

  // Time of one encoder layer's GEMMs (forward + backward), per library, and
  // with the best library per shape. Batched shapes use each library's better mode.
  std::printf("\nGEMM time of one BERT-base encoder layer, fwd+bwd (x12 layers in brackets):\n");
  std::vector<double> lib_ms(libs.size(), 0.0);
  std::vector<bool> lib_complete(libs.size(), true);
  double best_ms = 0;
  bool best_complete = true;
  for (const Shape& s : kShapes) {
    if (s.per_layer == 0) continue;
    std::vector<double> t(libs.size(), std::numeric_limits<double>::infinity());
    for (auto& r : rows)
      if (r.s == &s)
        for (size_t l = 0; l < libs.size(); ++l)
          if (r.cells[l].ran && r.cells[l].c.pass()) t[l] = std::min(t[l], r.cells[l].t.median);
    double b = std::numeric_limits<double>::infinity();
    for (size_t l = 0; l < libs.size(); ++l) {
      if (std::isinf(t[l])) lib_complete[l] = false;
      else lib_ms[l] += 1e3 * s.per_layer * t[l];
      b = std::min(b, t[l]);
    }
    if (std::isinf(b)) best_complete = false;
    else best_ms += 1e3 * s.per_layer * b;
  }
  for (size_t l = 0; l < libs.size(); ++l) {
    if (!libs[l].available || !lib_complete[l]) { std::printf("  %-16s -\n", libs[l].name.c_str()); continue; }
    std::printf("  %-16s %7.2f ms  [%7.1f ms]", libs[l].name.c_str(), lib_ms[l], 12 * lib_ms[l]);
    if (best_complete) std::printf("  +%4.1f%% vs best library per shape", 100.0 * (lib_ms[l] / best_ms - 1));
    std::printf("\n");
  }
  if (best_complete) std::printf("  %-16s %7.2f ms  [%7.1f ms]\n", "best per shape", best_ms, 12 * best_ms);
  std::printf("\ntotal benchmark time %.1f s", std::chrono::duration<double>(Clock::now() - t_start).count());
  double load = other_load(run_start, cpu_snap());
  if (load >= 0) std::printf("; other processes + steal took %.0f%% of the machine", 100.0 * load);
  std::printf("\n");
  if (disturbed_rows)
    std::printf("warning: %d rows ran while other load was > 10%% of the machine: rerun on a quiet machine\n"
                "         (libraries are interleaved call by call, so a row's ranking is fairer than its numbers)\n",
                disturbed_rows);
  return all_pass ? 0 : 3;
}
