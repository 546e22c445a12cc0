// CPU executor: runs a ThreadPlan on OpenMP threads, each pinned near the memory it reads.
#pragma once

#include "hybridgen/runtime/thread_plan.h"

#include <functional>

namespace hybridgen::rt {

/// Runs |body(work, threadIndex)| for every entry of |plan| on its own OpenMP thread (one parallel
/// region of plan.threads.size() threads). Each thread is first pinned to work.cpuNode; the pin is
/// remembered per OpenMP thread so steady-state steps pay nothing for it. |body| must not throw
/// (exceptions cannot cross an OpenMP region); an empty plan runs nothing. Returns the first pinning
/// error, if any (the body still runs, unpinned).
Status runPinned(const ThreadPlan &plan, const std::function<void(const ThreadWork &, int)> &body);

} // namespace hybridgen::rt
