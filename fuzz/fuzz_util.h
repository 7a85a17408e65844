#pragma once
// What every fuzz target shares: attempt() runs the target's work on one
// input, where a kiln::Error is a clean rejection of a bad input, not a
// finding. KILN_FUZZ_VERBOSE=1 prints each rejection, to see which check a
// corpus file reaches (fuzz_replay_<name> corpus/<name>).
#include <cstdio>
#include <cstdlib>

#include "kiln/core/error.h"

namespace kiln::fuzz {

inline bool verbose() {
  static const bool on = std::getenv("KILN_FUZZ_VERBOSE") != nullptr;
  return on;
}

inline void rejected(const Error& e) {
  if (verbose()) std::fprintf(stderr, "  rejected: %s\n", e.what());
}

// Runs fn(), the target's work on one input; returns false when the input
// was rejected (fn threw a kiln::Error). Any other exception escapes: a finding.
template <class Fn>
bool attempt(Fn&& fn) {
  try {
    fn();
    return true;
  } catch (const Error& e) {
    rejected(e);
  }
  return false;
}

}  // namespace kiln::fuzz
