#pragma once

#include <vector>

namespace opara {

// Pinning CpuParallelExecutor's workers to CPUs of their own.
//
// Unpinned, two busy workers can share one core for milliseconds while the other idles: Linux does
// not move a task that ran within the last half millisecond (sched_migration_cost_ns), and a worker
// that spins between nodes always has: a run then goes at one core's speed. Pinned, it cannot.

// The CPUs the calling thread may run on (its affinity mask: the process's unless the thread was
// pinned), in increasing order; without an affinity mask (not Linux), 0 .. hardware_concurrency - 1.
std::vector<int> allowed_cpus();

// Pins the calling thread to `cpu`; false where the system refuses or has no affinity (then the
// thread runs where the scheduler puts it, as it would have unpinned).
bool pin_current_thread(int cpu);

}  // namespace opara
