// PlacementPolicy: bandwidth-proportional spread of host blocks, hot blocks on the fastest tier.
#include "hybridgen/runtime/placement.h"

#include <algorithm>
#include <cmath>

namespace hybridgen::rt {

namespace {
constexpr double kSinkScore = 1e18;   // above any hit count
constexpr double kRecentScore = 1e17;

struct Cand {
  int64_t seq;
  int64_t logical;
  int32_t block;
  int32_t current;
  double score;
};
} // namespace

Status PlacementConfig::validate() const {
  if (sinkTokens < 0 || recentTokens < 0 || maxMigrationsPerStep < 0)
    return invalidArgument("placement: sinkTokens (" + std::to_string(sinkTokens) + "), recentTokens (" +
                           std::to_string(recentTokens) + ") and maxMigrationsPerStep (" +
                           std::to_string(maxMigrationsPerStep) + ") must be >= 0");
  return Status::ok();
}

std::vector<double> PlacementPolicy::hostShares(const Topology &topo) {
  std::vector<double> share(size_t(topo.tierCount()), 0.0);
  double total = 0;
  for (const auto &t : topo.tiers())
    total += t.kind == TierKind::kHbm ? 0 : t.readGBs;
  for (size_t i = 0; i < share.size(); ++i)
    if (topo.tiers()[i].kind != TierKind::kHbm && total > 0)
      share[i] = topo.tiers()[i].readGBs / total;
  return share;
}

std::vector<int32_t> PlacementPolicy::appendOrder(const Topology &topo) const {
  std::vector<int32_t> order;
  for (int32_t t = 0; t < topo.tierCount(); ++t) // topology order: HBM first, then by bandwidth
    order.push_back(t);
  return order;
}

double PlacementPolicy::hotness(const KvPool &pool, int32_t block, int64_t logical, int64_t hostEnd) const {
  const int64_t bs = pool.layout().blockSize;
  if (logical * bs < cfg_.sinkTokens)
    return kSinkScore;
  if (hostEnd - logical * bs <= cfg_.recentTokens)
    return kRecentScore;
  return cfg_.useHits ? double(pool.hits(block)) : 0.0;
}

std::vector<Migration> PlacementPolicy::plan(const KvPool &pool, int64_t split) const {
  const Topology &topo = pool.topology();
  const int32_t nt = topo.tierCount();
  const int64_t bs = pool.layout().blockSize;
  int32_t hbm = -1;
  for (int32_t t = 0; t < nt && hbm < 0; ++t)
    if (topo.tiers()[size_t(t)].kind == TierKind::kHbm)
      hbm = t;

  std::vector<Migration> out;
  std::vector<Cand> host;
  int64_t hbmRoom = hbm >= 0 ? pool.freeBlocks(hbm) : 0;
  for (int64_t seq : pool.sequences()) {
    const auto &table = pool.blockTable(seq);
    const int64_t len = pool.seqLen(seq);
    const int64_t cpuEnd = std::min(split, len);
    for (size_t j = 0; j < table.size(); ++j) {
      int32_t b = table[j];
      int32_t cur = pool.tierOfBlock(b);
      bool cpuSide = hbm < 0 || int64_t(j) * bs < cpuEnd;
      if (!cpuSide) {
        if (cur == hbm)
          continue;
        if (hbmRoom > 0) { // GPU tokens belong in HBM when it has room
          out.push_back({seq, int64_t(j), cur, hbm, 2e18});
          --hbmRoom;
        } else {
          host.push_back({seq, int64_t(j), b, cur, 0}); // HBM full: place it well among host tiers
        }
        continue;
      }
      int64_t hostEnd = hbm < 0 ? len : cpuEnd;
      host.push_back({seq, int64_t(j), b, cur, hotness(pool, b, int64_t(j), hostEnd)});
    }
  }

  // Quotas: bandwidth-proportional, capped by capacity, leftovers to the fastest tiers with room.
  std::vector<double> share = hostShares(topo);
  std::vector<int64_t> quota(size_t(nt), 0);
  int64_t n = int64_t(host.size()), given = 0;
  for (int32_t t = 0; t < nt; ++t) {
    quota[size_t(t)] = std::min(pool.tierUsage(t).capacityBlocks, int64_t(std::floor(double(n) * share[size_t(t)])));
    given += quota[size_t(t)];
  }
  for (int32_t t = 0; t < nt && given < n; ++t) {
    if (topo.tiers()[size_t(t)].kind == TierKind::kHbm)
      continue;
    int64_t extra = std::min(n - given, pool.tierUsage(t).capacityBlocks - quota[size_t(t)]);
    quota[size_t(t)] += extra;
    given += extra;
  }

  // Hot blocks first, onto the fastest host tier with quota left.
  // Ties broken by (seq, logical) so plans are deterministic (and no stable_sort buffer is needed).
  std::sort(host.begin(), host.end(), [](const Cand &a, const Cand &b) {
    if (a.score != b.score)
      return a.score > b.score;
    return a.seq != b.seq ? a.seq < b.seq : a.logical < b.logical;
  });
  std::vector<int32_t> target(host.size(), -1);
  auto fastestWithQuota = [&]() {
    for (int32_t t = 0; t < nt; ++t)
      if (topo.tiers()[size_t(t)].kind != TierKind::kHbm && quota[size_t(t)] > 0)
        return t;
    return int32_t(-1);
  };
  for (size_t i = 0; i < host.size() && host[i].score > 0; ++i) {
    int32_t t = fastestWithQuota();
    if (t < 0)
      break;
    target[i] = t;
    --quota[size_t(t)];
  }
  // Cold blocks keep their tier while its quota lasts, so steady state does not churn.
  for (size_t i = 0; i < host.size(); ++i)
    if (target[i] < 0 && host[i].current >= 0 && host[i].current != hbm && quota[size_t(host[i].current)] > 0) {
      target[i] = host[i].current;
      --quota[size_t(host[i].current)];
    }
  for (size_t i = 0; i < host.size(); ++i) {
    if (target[i] < 0) {
      int32_t t = fastestWithQuota();
      target[i] = t < 0 ? host[i].current : t;
      if (t >= 0)
        --quota[size_t(t)];
    }
    if (target[i] != host[i].current)
      out.push_back({host[i].seq, host[i].logical, host[i].current, target[i],
                     host[i].score + (target[i] < host[i].current ? 1.0 : 0.0)});
  }
  std::sort(out.begin(), out.end(), [](const Migration &a, const Migration &b) {
    if (a.priority != b.priority)
      return a.priority > b.priority;
    return a.seq != b.seq ? a.seq < b.seq : a.logical < b.logical;
  });
  return out;
}

Result<int64_t> PlacementPolicy::rebalance(KvPool &pool, int64_t split) const {
  std::vector<Migration> todo = plan(pool, split);
  int64_t done = 0;
  // Two passes: a move out of a full tier in pass one can make room for a move into it in pass two.
  for (int pass = 0; pass < 2 && done < cfg_.maxMigrationsPerStep; ++pass) {
    for (auto &m : todo) {
      if (done >= cfg_.maxMigrationsPerStep)
        break;
      if (m.toTier < 0 || pool.freeBlocks(m.toTier) == 0)
        continue;
      int32_t cur = pool.tierOfBlock(pool.blockTable(m.seq)[size_t(m.logical)]);
      if (cur == m.toTier)
        continue;
      Status s = pool.migrateBlock(m.seq, m.logical, m.toTier);
      if (!s)
        return s;
      m.toTier = -1; // done
      ++done;
    }
  }
  return done;
}

} // namespace hybridgen::rt
