// Semantic-aware placement: which tier each KV block should live on, and bounded migration toward it.
#pragma once

#include "hybridgen/runtime/kv_pool.h"

#include <cstdint>
#include <vector>

namespace hybridgen::rt {

struct PlacementConfig {
  int64_t sinkTokens = 64;       // the first tokens of a sequence ("attention sinks") stay hot
  int64_t recentTokens = 1024;   // the newest host tokens of a sequence stay hot
  bool useHits = true;           // sparse mode: blocks selected more often are hotter
  int64_t maxMigrationsPerStep = 64;

  /// kInvalidArgument when a token count or the migration budget is negative.
  Status validate() const;
};

struct Migration {
  int64_t seq = 0;
  int64_t logical = 0;
  int32_t fromTier = 0;
  int32_t toTier = 0;
  double priority = 0;  // higher first
};

/// Policy (docs/runtime.md): blocks of tokens before the split point are CPU blocks and live on host
/// tiers; the others are GPU blocks and live in HBM when it has room. Host blocks are spread over the
/// host tiers in proportion to read bandwidth (dense attention reads all of them every step, so equal
/// time per tier is the balance), and within that spread the hottest blocks (sinks, recent window,
/// most-hit) take the fastest tier. Blocks already on an acceptable tier stay put (no churn).
class PlacementPolicy {
public:
  explicit PlacementPolicy(PlacementConfig cfg = {}) : cfg_(cfg) {}
  const PlacementConfig &config() const { return cfg_; }

  /// Fraction of host blocks each tier should hold (0 for HBM tiers); sums to 1 over host tiers.
  static std::vector<double> hostShares(const Topology &topo);
  /// Desired tier of every allocated block, given the split point in tokens (per sequence, tokens
  /// [0, split) are CPU tokens). Returns the migrations needed, highest priority first.
  std::vector<Migration> plan(const KvPool &pool, int64_t split) const;
  /// Executes at most maxMigrationsPerStep migrations of plan(); returns how many ran. Migrations
  /// that find their target full are skipped this step (retried by the next call).
  Result<int64_t> rebalance(KvPool &pool, int64_t split) const;
  /// Tier order for new blocks: HBM (the GPU holds the newest tokens), then host tiers fastest first.
  std::vector<int32_t> appendOrder(const Topology &topo) const;

private:
  double hotness(const KvPool &pool, int32_t block, int64_t logical, int64_t hostEnd) const;
  PlacementConfig cfg_;
};

} // namespace hybridgen::rt
