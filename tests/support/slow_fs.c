// slow_fs: an LD_PRELOAD library for tests that kill the kiln command in the
// middle of a checkpoint save or removal. kiln itself knows nothing of it: it
// wraps the C library's rename and remove calls as the program makes them
// (directly or through std::filesystem), sleeps first when asked, and then
// calls the real function. Variables:
//   SLOW_FS_RENAME_MS  sleep before each rename/renameat/renameat2
//   SLOW_FS_REMOVE_MS  sleep before each remove/unlink/unlinkat/rmdir
//   SLOW_FS_MATCH      only for paths containing this text (all paths when unset)
//   SLOW_FS_READY      a file created when the library is loaded (tests probe
//                      with it that preloading works, e.g. under ASan)
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static long env_ms(const char* name) {
  const char* v = getenv(name);
  return v && *v ? atol(v) : 0;
}

static int matches(const char* a, const char* b) {
  const char* m = getenv("SLOW_FS_MATCH");
  if (!m || !*m) return 1;
  return (a && strstr(a, m)) || (b && strstr(b, m));
}

static void pause_for(const char* variable, const char* a, const char* b) {
  const long ms = env_ms(variable);
  if (ms <= 0 || !matches(a, b)) return;
  struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&t, &t) != 0) {
  }
}

// The next definition of `name` after this library: the C library's.
static void* real(const char* name) {
  void* f = dlsym(RTLD_NEXT, name);
  if (!f) {
    static const char msg[] = "slow_fs: dlsym(RTLD_NEXT) found no real function\n";
    (void)!write(2, msg, sizeof msg - 1);
    abort();
  }
  return f;
}

__attribute__((constructor)) static void announce(void) {
  const char* ready = getenv("SLOW_FS_READY");
  if (!ready || !*ready) return;
  const int fd = open(ready, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd >= 0) close(fd);
}

int rename(const char* from, const char* to) {
  pause_for("SLOW_FS_RENAME_MS", from, to);
  return ((int (*)(const char*, const char*))real("rename"))(from, to);
}

int renameat(int from_dir, const char* from, int to_dir, const char* to) {
  pause_for("SLOW_FS_RENAME_MS", from, to);
  return ((int (*)(int, const char*, int, const char*))real("renameat"))(from_dir, from, to_dir, to);
}

int renameat2(int from_dir, const char* from, int to_dir, const char* to, unsigned flags) {
  pause_for("SLOW_FS_RENAME_MS", from, to);
  return ((int (*)(int, const char*, int, const char*, unsigned))real("renameat2"))(from_dir, from, to_dir, to, flags);
}

int remove(const char* path) {
  pause_for("SLOW_FS_REMOVE_MS", path, NULL);
  return ((int (*)(const char*))real("remove"))(path);
}

int unlink(const char* path) {
  pause_for("SLOW_FS_REMOVE_MS", path, NULL);
  return ((int (*)(const char*))real("unlink"))(path);
}

// The directory that `dir` (an open descriptor) names, for SLOW_FS_MATCH on
// paths relative to it (std::filesystem::remove_all removes through unlinkat).
static const char* dir_path(int dir, char* buf, size_t size) {
  if (dir == AT_FDCWD) return NULL;
  char link[64];
  snprintf(link, sizeof link, "/proc/self/fd/%d", dir);
  const ssize_t n = readlink(link, buf, size - 1);
  if (n < 0) return NULL;
  buf[n] = '\0';
  return buf;
}

int unlinkat(int dir, const char* path, int flags) {
  char buf[4096];
  pause_for("SLOW_FS_REMOVE_MS", path, dir_path(dir, buf, sizeof buf));
  return ((int (*)(int, const char*, int))real("unlinkat"))(dir, path, flags);
}

int rmdir(const char* path) {
  pause_for("SLOW_FS_REMOVE_MS", path, NULL);
  return ((int (*)(const char*))real("rmdir"))(path);
}
