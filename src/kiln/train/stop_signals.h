#pragma once
// SIGINT and SIGTERM as a request to stop training cleanly. While a training
// loop listens, the first signal only sets a flag, which the loop reads
// between steps: it finishes the step, saves a checkpoint and returns. A
// second signal, or one that arrives while no loop listens, ends the process
// at once (the signal's default action).
namespace kiln::train {

// Installs the handlers for SIGINT and SIGTERM (kiln train does; a program
// embedding the Trainer may). Without them the signals keep their default.
void install_stop_handlers();

// The signal that asked to stop (SIGINT or SIGTERM), or 0.
int stop_requested();

// "SIGINT", "SIGTERM", or "a signal".
const char* signal_name(int sig);

// While one exists, a first signal asks to stop instead of ending the process.
class StopListener {
 public:
  StopListener();
  ~StopListener();
  StopListener(const StopListener&) = delete;
  StopListener& operator=(const StopListener&) = delete;
};

}  // namespace kiln::train
