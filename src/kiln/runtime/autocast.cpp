#include "kiln/runtime/autocast.h"

namespace kiln {
namespace {
thread_local bool t_autocast = false;
}

Autocast::Autocast(bool enabled) : prev_(t_autocast) { t_autocast = enabled; }
Autocast::~Autocast() { t_autocast = prev_; }
bool Autocast::active() { return t_autocast; }

}  // namespace kiln
