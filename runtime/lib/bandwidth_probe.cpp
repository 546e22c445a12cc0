// Short read-bandwidth probe of one NUMA node's memory from the CPUs of another.
#include "hybridgen/runtime/topology.h"

#include <numa.h>
#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

namespace hybridgen::rt {

double probeReadBandwidth(int32_t memNode, int32_t cpuNode, uint64_t bytes) {
  if (numa_available() < 0 || bytes < (1u << 20))
    return 0;
  void *mem = numa_alloc_onnode(bytes, memNode);
  if (!mem)
    return 0;
  std::memset(mem, 1, bytes); // fault the pages in on the requested node
  const size_t n = bytes / (4 * sizeof(uint64_t)) * 4; // whole groups of four for the unrolled loop
  const uint64_t *p = static_cast<const uint64_t *>(mem);
  int threads = 0;
  {
    struct bitmask *cpus = numa_allocate_cpumask();
    if (numa_node_to_cpus(cpuNode, cpus) == 0)
      for (unsigned c = 0; c < cpus->size; ++c)
        threads += numa_bitmask_isbitset(cpus, c) ? 1 : 0;
    numa_free_cpumask(cpus);
  }
  threads = std::max(1, threads);
  double best = 0;
  volatile uint64_t sink = 0;
  for (int rep = 0; rep < 3; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    uint64_t total = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
    {
      // Pin to the reader node for the probe only; the pool threads get their mask back after.
      cpu_set_t saved;
      sched_getaffinity(0, sizeof saved, &saved);
      numa_run_on_node(cpuNode);
      uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
#pragma omp for schedule(static)
      for (size_t i = 0; i < n; i += 4) {
        s0 += p[i];
        s1 += p[i + 1];
        s2 += p[i + 2];
        s3 += p[i + 3];
      }
      total += s0 + s1 + s2 + s3;
      sched_setaffinity(0, sizeof saved, &saved);
    }
    double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    sink = sink + total;
    if (sec > 0) // a clock that did not advance measures nothing (and would give infinity)
      best = std::max(best, double(bytes) / sec / 1e9);
  }
  numa_free(mem, bytes);
  return best;
}

} // namespace hybridgen::rt
