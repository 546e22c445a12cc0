// runPinned: one OpenMP region per plan, per-thread cached NUMA pinning.
#include "hybridgen/runtime/executor.h"

#include <omp.h>

#include <mutex>

namespace hybridgen::rt {

Status runPinned(const ThreadPlan &plan, const std::function<void(const ThreadWork &, int)> &body) {
  const int n = int(plan.threads.size());
  if (n == 0)
    return Status::ok();
  Status firstError;
  std::mutex mu;
#pragma omp parallel num_threads(n)
  {
    const int t = omp_get_thread_num();
    // OpenMP may give fewer threads than asked (nested regions, limits): loop over the entries.
    for (int i = t; i < n; i += omp_get_num_threads()) {
      const ThreadWork &w = plan.threads[size_t(i)];
      thread_local int pinnedNode = -1; // OpenMP reuses its threads across regions
      if (pinnedNode != w.cpuNode) {
        Status s = pinCurrentThreadToNode(w.cpuNode);
        if (s.isOk()) {
          pinnedNode = w.cpuNode;
        } else {
          std::lock_guard<std::mutex> lock(mu);
          if (firstError.isOk())
            firstError = s;
        }
      }
      body(w, i);
    }
  }
  return firstError;
}

} // namespace hybridgen::rt
