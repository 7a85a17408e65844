#include "kiln/train/stop_signals.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>

namespace kiln::train {

namespace {

// Read and written by the handler: lock-free atomics are async-signal-safe.
std::atomic<int> g_signal{0};
std::atomic<int> g_listeners{0};
static_assert(std::atomic<int>::is_always_lock_free);

void say(const char* text) {
  size_t n = 0;
  while (text[n]) ++n;
  [[maybe_unused]] ssize_t written = ::write(STDERR_FILENO, text, n);
}

extern "C" void on_stop_signal(int sig) {
  int none = 0;
  if (g_listeners.load() > 0 && g_signal.compare_exchange_strong(none, sig)) {
    say(sig == SIGINT ? "\nkiln train: SIGINT: stopping after this step and saving a checkpoint (again to quit now)\n"
                      : "\nkiln train: SIGTERM: stopping after this step and saving a checkpoint (again to quit now)\n");
    return;
  }
  // A second signal, or no loop listening: what the signal does by default, now.
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

}  // namespace

void install_stop_handlers() {
  struct sigaction action = {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // reads and writes in flight carry on
  for (int sig : {SIGINT, SIGTERM}) ::sigaction(sig, &action, nullptr);
}

int stop_requested() { return g_signal.load(); }

const char* signal_name(int sig) {
  switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    default: return "a signal";
  }
}

StopListener::StopListener() { ++g_listeners; }
StopListener::~StopListener() { --g_listeners; }

}  // namespace kiln::train
