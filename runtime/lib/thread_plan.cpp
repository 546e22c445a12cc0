// planThreads: bandwidth-weighted thread counts per tier and equal-token chunks inside a tier.
#include "hybridgen/runtime/thread_plan.h"

#include <numa.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <numeric>

namespace hybridgen::rt {

double ThreadPlan::estSeconds() const {
  double m = 0;
  for (const auto &t : threads)
    m = std::max(m, t.estSeconds);
  return m;
}

ThreadPlan planThreads(const KvPool &pool, const std::vector<int64_t> &seqs, int64_t split, int32_t numThreads) {
  ThreadPlan plan;
  const Topology &topo = pool.topology();
  const int32_t nt = topo.tierCount();
  const int64_t bs = pool.layout().blockSize;
  const double bytesPerToken = 2.0 * pool.layout().kvHeads * pool.layout().rowBytes(); // K and V
  numThreads = std::max(1, numThreads);

  std::vector<std::vector<WorkItem>> perTier(static_cast<size_t>(nt));
  std::vector<int64_t> tokens(size_t(nt), 0);
  for (size_t i = 0; i < seqs.size(); ++i) {
    const auto &table = pool.blockTable(seqs[i]);
    int64_t cpuEnd = std::min(split, std::max<int64_t>(pool.seqLen(seqs[i]), 0));
    for (int64_t j = 0; j * bs < cpuEnd; ++j) {
      int32_t b = table[size_t(j)];
      int32_t t = pool.tierOfBlock(b);
      int32_t n = int32_t(std::min(bs, cpuEnd - j * bs));
      perTier[size_t(t)].push_back({int32_t(i), int32_t(j), b, n});
      tokens[size_t(t)] += n;
    }
  }
  std::vector<double> time(size_t(nt), 0); // seconds for one reader of the tier's full bandwidth
  std::vector<int32_t> active;
  for (int32_t t = 0; t < nt; ++t)
    if (tokens[size_t(t)] > 0) {
      time[size_t(t)] = double(tokens[size_t(t)]) * bytesPerToken / (topo.tiers()[size_t(t)].readGBs * 1e9);
      active.push_back(t);
    }
  if (active.empty())
    return plan;
  // A thread without a block has nothing to do; capping here also bounds the distribution loop
  // below by the work, not by a caller's thread count (INT32_MAX threads must not spin for minutes).
  size_t items = 0;
  for (const auto &v : perTier)
    items += v.size();
  numThreads = int32_t(std::min<size_t>(size_t(numThreads), items));

  if (int32_t(active.size()) > numThreads) {
    // Too few threads: longest-processing-time-first over whole tiers.
    std::sort(active.begin(), active.end(), [&](int32_t a, int32_t b) { return time[size_t(a)] > time[size_t(b)]; });
    plan.threads.resize(size_t(numThreads));
    for (int32_t t : active) {
      auto it = std::min_element(plan.threads.begin(), plan.threads.end(),
                                 [](const ThreadWork &a, const ThreadWork &b) { return a.estSeconds < b.estSeconds; });
      if (it->tier < 0) {
        it->tier = t;
        it->cpuNode = topo.tiers()[size_t(t)].readerNode;
      }
      it->estSeconds += time[size_t(t)];
      it->items.insert(it->items.end(), perTier[size_t(t)].begin(), perTier[size_t(t)].end());
    }
    return plan;
  }

  // One thread per active tier, then the rest to whichever tier has the longest time per thread.
  std::vector<int32_t> count(size_t(nt), 0);
  for (int32_t t : active)
    count[size_t(t)] = 1;
  for (int32_t left = numThreads - int32_t(active.size()); left > 0; --left) {
    int32_t worst = *std::max_element(active.begin(), active.end(), [&](int32_t a, int32_t b) {
      return time[size_t(a)] / count[size_t(a)] < time[size_t(b)] / count[size_t(b)];
    });
    ++count[size_t(worst)];
  }
  for (int32_t t : active) {
    const auto &items = perTier[size_t(t)];
    const int32_t k = count[size_t(t)];
    const double per = double(tokens[size_t(t)]) / k;
    size_t pos = 0;
    int64_t done = 0;
    for (int32_t c = 0; c < k; ++c) {
      ThreadWork w;
      w.tier = t;
      w.cpuNode = topo.tiers()[size_t(t)].readerNode;
      int64_t chunkTokens = 0;
      // Whole blocks until this thread's cumulative share is reached (last thread takes the rest).
      while (pos < items.size() && (c == k - 1 || double(done + items[pos].tokens) <= per * (c + 1) + 0.5 * bs)) {
        chunkTokens += items[pos].tokens;
        done += items[pos].tokens;
        w.items.push_back(items[pos++]);
      }
      w.estSeconds = double(chunkTokens) * bytesPerToken / (topo.tiers()[size_t(t)].readGBs * 1e9 / k);
      plan.threads.push_back(std::move(w));
    }
  }
  return plan;
}

Status pinCurrentThreadToNode(int32_t node) {
  if (numa_available() < 0)
    return Status::ok();
  if (numa_run_on_node(node) != 0)
    return systemError("numa_run_on_node(" + std::to_string(node) + "): " + std::strerror(errno));
  return Status::ok();
}

} // namespace hybridgen::rt
