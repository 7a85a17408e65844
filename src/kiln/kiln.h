#pragma once
// The public C++ API in one include.
#include "kiln/core/device.h"
#include "kiln/core/error.h"
#include "kiln/distributed/replica.h"
#include "kiln/optim/optimizer.h"
#include "kiln/runtime/autocast.h"
#include "kiln/runtime/context.h"
#include "kiln/runtime/metrics.h"
#include "kiln/runtime/ops.h"
#include "kiln/runtime/tensor.h"
