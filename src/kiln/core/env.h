#pragma once
// On/off switches read from the environment (KILN_JIT, KILN_HUGE_PAGES).

namespace kiln {

// The variable `name`: unset or empty, 1 or on → true; 0 or off → false;
// anything else throws kiln::Error naming the variable and the value found.
bool env_switch(const char* name);

}  // namespace kiln
