// Linked into every test binary that links kiln: when its tests end, it waits
// for the steps still queued on the devices, as the kiln command does before
// it exits (tools/main.cpp). A step still running at exit would race the
// teardown of the libraries it calls (oneDNN's static state).
#include <gtest/gtest.h>

#include <exception>

#include "kiln/runtime/context.h"

namespace {

class WaitForDeviceOps : public ::testing::Environment {
 public:
  void TearDown() override {
    try {
      kiln::wait_all_device_ops();
    } catch (const std::exception&) {  // (a queued step's own failure: its test reports it)
    }
  }
};

[[maybe_unused]] ::testing::Environment* const kWaitForDeviceOps =
    ::testing::AddGlobalTestEnvironment(new WaitForDeviceOps);

}  // namespace
