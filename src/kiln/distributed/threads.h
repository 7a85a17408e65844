#pragma once
// How many threads a device's kernels use: an equal share of the cores for
// each replica of a spawn(), all of them otherwise (divided among the
// processes mpirun started on this host).
#include "kiln/core/device.h"

namespace kiln::dist {

int threads_for(Device device);
int default_threads();

}  // namespace kiln::dist
