// libFuzzer target over the runtime: random operation sequences on a KV pool, its scheduler context,
// the placement policy, the thread planner and the C ABI, checked against a shadow model; and the
// token sampler on hostile options and logits.
//
// Each input is one sequence: a few bytes choose the pool (layers, layout, one to three tiers and their capacities), the
// rest is a list of operations with operands that are often hostile (INT64_MAX, negative, ids that
// do not exist). After every operation the pool must agree with the shadow: an operation succeeds
// exactly when the shadow says it may, lengths and block ownership agree, a refused operation leaves
// the bytes of every allocated block unchanged, and every token written reads back as written
// (checked after migrations and rebalancing, every 8 operations and at the end). Any disagreement aborts (a finding); ASan and UBSan
// catch the rest. See docs/reliability.md.
#include "hybridgen/runtime/c_api.h"
#include "hybridgen/runtime/checked.h"
#include "hybridgen/runtime/context.h"
#include "hybridgen/runtime/cuda/gpu_runtime.h"
#include "hybridgen/runtime/kv_pool.h"
#include "hybridgen/runtime/model/sampler.h"
#include "hybridgen/runtime/placement.h"
#include "hybridgen/runtime/scheduler.h"
#include "hybridgen/runtime/thread_plan.h"
#include "hybridgen/runtime/topology.h"

#include <fuzzer/FuzzedDataProvider.h>

#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

using namespace hybridgen::rt;

namespace {

#define FUZZ_CHECK(cond)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      std::fprintf(stderr, "runtime_fuzz: check failed at line %d: %s\n", __LINE__, #cond);       \
      std::abort();                                                                                \
    }                                                                                              \
  } while (0)

constexpr int kMaxOps = 96;
constexpr int64_t kMaxBuffered = 1 << 12; // a count above this can never fit the small pools here

/// Counts and positions: mostly small, sometimes the values that break naive bounds checks.
int64_t pickCount(FuzzedDataProvider &in, int64_t typical) {
  static const int64_t hostile[] = {INT64_MAX, INT64_MAX - 1, INT64_MAX - 10, INT64_MIN, -1, -16,
                                    int64_t(INT32_MAX), int64_t(INT32_MAX) + 1, int64_t(1) << 62,
                                    int64_t(INT32_MIN)};
  if (in.ConsumeIntegralInRange<int>(0, 9) == 0)
    return hostile[in.ConsumeIntegralInRange<size_t>(0, std::size(hostile) - 1)];
  return in.ConsumeIntegralInRange<int64_t>(0, typical);
}

double pickSeconds(FuzzedDataProvider &in) {
  switch (in.ConsumeIntegralInRange<int>(0, 7)) {
  case 0: return std::nan("");
  case 1: return std::numeric_limits<double>::infinity();
  case 2: return -1e-3;
  case 3: return 0;
  default: return in.ConsumeFloatingPointInRange<double>(0, 1e-2);
  }
}

/// What the pool should hold: per sequence, its length and, per layer, each token's bytes when
/// known (appendTokens leaves slots with whatever the block held before: unknown).
struct ShadowSeq {
  int64_t len = 0;
  std::vector<std::vector<uint8_t>> bytes; // [layer][token * tokenBytes]
  std::vector<std::vector<bool>> known;    // [layer][token]
};

struct Harness {
  std::unique_ptr<KvPool> pool;
  std::map<int64_t, ShadowSeq> shadow;
  std::shared_ptr<SchedulerContext> ctx;
  size_t tokenBytes = 0;
  uint32_t nextTag = 1;

  int32_t layers() const { return pool->numLayers(); }
  int64_t bs() const { return pool->layout().blockSize; }

  /// A sequence id to act on: usually a live one, sometimes one that does not exist.
  int64_t pickSeq(FuzzedDataProvider &in) {
    if (shadow.empty() || in.ConsumeIntegralInRange<int>(0, 7) == 0)
      return in.ConsumeBool() ? pickCount(in, 64) : -in.ConsumeIntegralInRange<int64_t>(1, 3);
    auto it = shadow.begin();
    std::advance(it, in.ConsumeIntegralInRange<size_t>(0, shadow.size() - 1));
    return it->first;
  }

  void fill(std::vector<uint8_t> &buf, int64_t tokens) {
    buf.resize(size_t(tokens) * tokenBytes);
    uint32_t x = nextTag++ * 2654435761u;
    for (auto &b : buf) {
      x = x * 1664525u + 1013904223u;
      b = uint8_t(x >> 24);
    }
  }

  /// Every allocated block's K and V bytes in every layer, plus the tables and free lists: what a
  /// refused operation must not change. Taken only before an operation the shadow expects to be
  /// refused (memcpy, not a byte loop: this runs instrumented).
  std::string snapshot() const {
    std::string out;
    auto add = [&out](const void *p, size_t n) { out.append(static_cast<const char *>(p), n); };
    const size_t bb = pool->layout().blockBytes();
    for (int64_t s : pool->sequences()) {
      const auto &table = pool->blockTable(s);
      int64_t len = pool->seqLen(s);
      add(&len, sizeof len);
      add(table.data(), table.size() * sizeof(int32_t));
      for (int32_t b : table)
        for (int32_t l = 0; l < layers(); ++l) {
          add(static_cast<const char *>(pool->kBase(l)) + size_t(b) * bb, bb);
          add(static_cast<const char *>(pool->vBase(l)) + size_t(b) * bb, bb);
        }
    }
    for (int32_t t = 0; t < pool->topology().tierCount(); ++t) {
      int64_t f = pool->freeBlocks(t);
      add(&f, sizeof f);
    }
    return out;
  }

  /// The invariants that hold after every operation; with |data|, also every known token's bytes
  /// (the fuzz loop asks for that after operations that move data, every 8 operations and at the end).
  void verify(bool data) const {
    FUZZ_CHECK(pool->sequences().size() == shadow.size());
    std::set<int32_t> seen;
    std::vector<int64_t> used(size_t(pool->topology().tierCount()), 0);
    std::vector<uint8_t> k, v;
    for (const auto &[seq, sh] : shadow) {
      FUZZ_CHECK(pool->hasSequence(seq));
      FUZZ_CHECK(pool->seqLen(seq) == sh.len);
      const auto &table = pool->blockTable(seq);
      FUZZ_CHECK(int64_t(table.size()) == ceilDiv(sh.len, bs()));
      for (size_t j = 0; j < table.size(); ++j) {
        int32_t b = table[j];
        FUZZ_CHECK(seen.insert(b).second); // no block in two tables (or twice in one)
        FUZZ_CHECK(pool->blockOwner(b) == seq && pool->blockLogical(b) == int32_t(j));
        int32_t t = pool->tierOfBlock(b);
        FUZZ_CHECK(t >= 0);
        ++used[size_t(t)];
      }
      if (!data)
        continue;
      k.resize(size_t(sh.len) * tokenBytes);
      v.resize(k.size());
      for (int32_t l = 0; l < layers(); ++l) {
        FUZZ_CHECK(pool->readTokens(seq, l, 0, sh.len, k.data(), v.data()).isOk());
        for (int64_t t = 0; t < sh.len; ++t)
          if (sh.known[size_t(l)][size_t(t)]) {
            const uint8_t *want = sh.bytes[size_t(l)].data() + size_t(t) * tokenBytes;
            FUZZ_CHECK(std::memcmp(k.data() + size_t(t) * tokenBytes, want, tokenBytes) == 0);
            FUZZ_CHECK(std::memcmp(v.data() + size_t(t) * tokenBytes, want, tokenBytes) == 0);
          }
      }
    }
    for (int32_t t = 0; t < pool->topology().tierCount(); ++t) {
      TierUsage u = pool->tierUsage(t);
      FUZZ_CHECK(u.usedBlocks == used[size_t(t)]);
      FUZZ_CHECK(u.usedBlocks + pool->freeBlocks(t) == u.capacityBlocks);
    }
  }

  /// Room for |need| blocks in the tiers an append may use.
  bool roomFor(int64_t need) const {
    int64_t room = 0;
    const auto &order = pool->appendTierOrder();
    for (size_t i = 0; i < order.size(); ++i)
      room += pool->freeBlocks(order[i]);
    return need <= room;
  }

  void opsOnPool(FuzzedDataProvider &in, int op);
  void opsOnScheduler(FuzzedDataProvider &in, int op);
  void opsOnGpuChecks(FuzzedDataProvider &in);
};

/// Expected outcome of appending |n| tokens to |seq| per the shadow (spill is on in these pools).
ErrorCode expectAppend(const Harness &h, int64_t seq, int64_t n) {
  auto it = h.shadow.find(seq);
  if (it == h.shadow.end())
    return ErrorCode::kNotFound;
  int64_t newLen = 0;
  if (n < 0 || !checkedAdd(it->second.len, n, &newLen) || newLen > INT32_MAX)
    return ErrorCode::kInvalidArgument;
  int64_t need = ceilDiv(newLen, h.bs()) - ceilDiv(it->second.len, h.bs());
  return h.roomFor(need) ? ErrorCode::kOk : ErrorCode::kExhausted;
}

void grow(Harness &h, ShadowSeq &sh, int64_t n, const std::vector<uint8_t> *data) {
  for (int32_t l = 0; l < h.layers(); ++l) {
    auto &bytes = sh.bytes[size_t(l)];
    bytes.resize(size_t(sh.len + n) * h.tokenBytes);
    sh.known[size_t(l)].resize(size_t(sh.len + n), data != nullptr);
    if (data && n > 0)
      std::memcpy(bytes.data() + size_t(sh.len) * h.tokenBytes,
                  data->data() + size_t(l) * size_t(n) * h.tokenBytes, size_t(n) * h.tokenBytes);
  }
  sh.len += n;
}

void Harness::opsOnPool(FuzzedDataProvider &in, int op) {
  // Set by the cases before they call the pool, from the shadow: the state to compare after a
  // refusal (a refusal the shadow did not predict fails its own check first).
  std::string before;
  bool refused = false;
  auto expectRefusal = [&](bool refuse) {
    if (refuse)
      before = snapshot();
  };
  std::vector<uint8_t> buf;
  switch (op) {
  case 0: { // create
    int64_t s = pool->createSequence();
    FUZZ_CHECK(!shadow.count(s));
    ShadowSeq sh;
    sh.bytes.resize(size_t(layers()));
    sh.known.resize(size_t(layers()));
    shadow.emplace(s, std::move(sh));
    break;
  }
  case 1: { // free, or truncate to a length (hostile ones included)
    int64_t s = pickSeq(in);
    if (in.ConsumeBool()) {
      Status st = pool->freeSequence(s);
      FUZZ_CHECK(st.isOk() == (shadow.erase(s) == 1));
      break;
    }
    int64_t len = pickCount(in, 60);
    auto it = shadow.find(s);
    ErrorCode want = it == shadow.end()                          ? ErrorCode::kNotFound
                     : len < 0 || len > it->second.len ? ErrorCode::kInvalidArgument
                                                                 : ErrorCode::kOk;
    expectRefusal(want != ErrorCode::kOk);
    Status st = pool->truncateSequence(s, len);
    FUZZ_CHECK(st.code() == want);
    if (st.isOk()) {
      ShadowSeq &sh = it->second;
      for (int32_t l = 0; l < layers(); ++l) {
        sh.bytes[size_t(l)].resize(size_t(len) * tokenBytes);
        sh.known[size_t(l)].resize(size_t(len));
      }
      sh.len = len;
    }
    refused = !st.isOk();
    break;
  }
  case 2:   // reserve slots without data
  case 3: { // append with data for every layer
    int64_t s = pickSeq(in), n = pickCount(in, 40);
    ErrorCode want = expectAppend(*this, s, n);
    const bool withData = op == 3;
    if (withData && n >= 0 && n <= kMaxBuffered)
      fill(buf, n * layers());
    else
      buf.assign(tokenBytes, 0); // too many tokens for any pool here: must be refused untouched
    expectRefusal(want != ErrorCode::kOk);
    Status st = withData ? pool->append(s, n, buf.data(), buf.data())
                         : pool->appendTokens(s, n).status();
    FUZZ_CHECK(st.code() == want);
    if (st.isOk())
      grow(*this, shadow[s], n, withData ? &buf : nullptr);
    refused = !st.isOk();
    break;
  }
  case 4:   // overwrite tokens of one layer
  case 5: { // read tokens of one layer
    int64_t s = pickSeq(in), pos = pickCount(in, 80), n = pickCount(in, 24);
    int32_t layer = in.ConsumeIntegralInRange<int32_t>(-1, layers());
    auto it = shadow.find(s);
    bool ok = it != shadow.end() && layer >= 0 && layer < layers() && rangeWithin(pos, n, it->second.len);
    if (ok)
      fill(buf, n);
    else
      buf.assign(tokenBytes, 0);
    std::vector<uint8_t> other(buf.size());
    expectRefusal(!ok);
    Status st = op == 4 ? pool->writeTokens(s, layer, pos, n, buf.data(), buf.data())
                        : pool->readTokens(s, layer, pos, n, buf.data(), other.data());
    FUZZ_CHECK(st.isOk() == ok);
    FUZZ_CHECK(ok || st.code() == (it == shadow.end() ? ErrorCode::kNotFound : ErrorCode::kInvalidArgument));
    if (ok && op == 4 && n > 0) {
      auto &sh = it->second;
      std::memcpy(sh.bytes[size_t(layer)].data() + size_t(pos) * tokenBytes, buf.data(), buf.size());
      for (int64_t t = pos; t < pos + n; ++t)
        sh.known[size_t(layer)][size_t(t)] = true;
    }
    if (ok && op == 5)
      for (int64_t t = 0; t < n; ++t)
        if (it->second.known[size_t(layer)][size_t(pos + t)])
          FUZZ_CHECK(std::memcmp(buf.data() + size_t(t) * tokenBytes,
                                 it->second.bytes[size_t(layer)].data() + size_t(pos + t) * tokenBytes,
                                 tokenBytes) == 0);
    refused = !ok;
    break;
  }
  case 6: { // migrate one block
    int64_t s = pickSeq(in), logical = pickCount(in, 4);
    int32_t tier = in.ConsumeIntegralInRange<int32_t>(-1, pool->topology().tierCount());
    auto it = shadow.find(s);
    bool valid = it != shadow.end() && logical >= 0 && logical < ceilDiv(it->second.len, bs()) &&
                 tier >= 0 && tier < pool->topology().tierCount();
    bool room = valid && (pool->tierOfBlock(pool->blockTable(s)[size_t(logical)]) == tier ||
                          pool->freeBlocks(tier) > 0);
    expectRefusal(!room);
    Status st = pool->migrateBlock(s, logical, tier);
    FUZZ_CHECK(st.isOk() == room);
    FUZZ_CHECK(room || st.code() == (valid ? ErrorCode::kExhausted
                                           : it == shadow.end() ? ErrorCode::kNotFound
                                                                : ErrorCode::kInvalidArgument));
    refused = !st.isOk();
    break;
  }
  case 7: { // batch block table
    std::vector<int64_t> seqs;
    for (int i = in.ConsumeIntegralInRange<int>(0, 4); i > 0; --i)
      seqs.push_back(pickSeq(in));
    int32_t maxBlocks = int32_t(in.ConsumeIntegralInRange<int64_t>(-2, 6));
    std::vector<int32_t> table(seqs.size() * size_t(std::max(maxBlocks, 0)), 7777), lens(seqs.size(), 7777);
    const std::vector<int32_t> tableBefore = table;
    Status st = pool->fillBatch(seqs, maxBlocks, table.data(), lens.data());
    bool ok = maxBlocks >= 0;
    for (int64_t s : seqs)
      ok = ok && shadow.count(s) && ceilDiv(shadow[s].len, bs()) <= maxBlocks;
    FUZZ_CHECK(st.isOk() == ok);
    if (!ok)
      FUZZ_CHECK(table == tableBefore && lens == std::vector<int32_t>(seqs.size(), 7777));
    for (size_t i = 0; ok && i < seqs.size(); ++i) {
      FUZZ_CHECK(lens[i] == shadow[seqs[i]].len);
      const auto &bt = pool->blockTable(seqs[i]);
      for (int32_t j = 0; j < maxBlocks; ++j)
        FUZZ_CHECK(table[i * size_t(maxBlocks) + size_t(j)] == (size_t(j) < bt.size() ? bt[size_t(j)] : -1));
    }
    break;
  }
  case 8: { // placement: plan and rebalance with any config (negative budgets included)
    PlacementConfig pc;
    pc.sinkTokens = pickCount(in, 64);
    pc.recentTokens = pickCount(in, 256);
    pc.maxMigrationsPerStep = pickCount(in, 16);
    pc.useHits = in.ConsumeBool();
    if (pool->sequences().size() && in.ConsumeBool())
      pool->addHits(int32_t(in.ConsumeIntegralInRange<int64_t>(-1, pool->numBlocks())), in.ConsumeIntegral<uint8_t>());
    PlacementPolicy policy(pc);
    auto done = policy.rebalance(*pool, pickCount(in, 200));
    FUZZ_CHECK(done.isOk());
    FUZZ_CHECK(*done <= std::max<int64_t>(pc.maxMigrationsPerStep, 0));
    break;
  }
  case 9: { // thread plan: every CPU token of a known sequence planned exactly once
    std::vector<int64_t> seqs;
    for (int i = in.ConsumeIntegralInRange<int>(0, 4); i > 0; --i)
      seqs.push_back(pickSeq(in));
    int64_t split = pickCount(in, 120);
    int32_t threads = int32_t(pickCount(in, 8));
    ThreadPlan plan = planThreads(*pool, seqs, split, threads);
    int64_t planned = 0, want = 0;
    std::set<std::pair<int32_t, int32_t>> items;
    for (const auto &w : plan.threads)
      for (const auto &it : w.items) {
        FUZZ_CHECK(it.tokens > 0 && it.tokens <= bs());
        FUZZ_CHECK(items.insert({it.batchIndex, it.logical}).second);
        FUZZ_CHECK(pool->blockTable(seqs[size_t(it.batchIndex)])[size_t(it.logical)] == it.block);
        planned += it.tokens;
      }
    for (int64_t s : seqs)
      want += shadow.count(s) ? std::clamp<int64_t>(split, 0, shadow[s].len) : 0;
    FUZZ_CHECK(planned == want);
    FUZZ_CHECK(plan.threads.size() <= std::max<size_t>(1, items.size()));
    break;
  }
  default: { // append tier order, possibly invalid
    std::vector<int32_t> order;
    for (int i = in.ConsumeIntegralInRange<int>(0, 4); i > 0; --i)
      order.push_back(in.ConsumeIntegralInRange<int32_t>(-1, pool->topology().tierCount()));
    bool valid = !order.empty() && std::set<int32_t>(order.begin(), order.end()).size() == order.size();
    for (int32_t t : order)
      valid = valid && t >= 0 && t < pool->topology().tierCount();
    FUZZ_CHECK(pool->setAppendTierOrder(order).isOk() == valid);
    break;
  }
  }
  if (refused)
    FUZZ_CHECK(snapshot() == before);
}

/// The checks that stand before a GPU launch (runtime/lib/cuda/batch_check.cpp, the C ABI's
/// hgrt_gpu_check_batch and hgrt_gpu_alias) on block tables and lengths the harness owns, against
/// their contract. The fuzzed pool has no device tier, so with the pool every block a GPU partial
/// would read must be refused. Sizes are hostile only where the contract lets the check refuse
/// them before it reads the arrays (non-positive sizes, null arrays, an overflowing block size).
void Harness::opsOnGpuChecks(FuzzedDataProvider &in) {
  auto nonPositive = [&] {
    const int64_t values[] = {0, -1, -16, INT64_MIN};
    return values[in.ConsumeIntegralInRange<size_t>(0, std::size(values) - 1)];
  };
  int64_t batch = in.ConsumeBool() ? in.ConsumeIntegralInRange<int64_t>(1, 4) : nonPositive();
  int64_t maxBlocks = in.ConsumeBool() ? in.ConsumeIntegralInRange<int64_t>(1, 8) : nonPositive();
  int64_t blockSize = in.ConsumeBool() ? bs() : pickCount(in, 64);
  int64_t split = in.ConsumeBool() ? pickCount(in, 100) : nonPositive();
  const bool withPool = in.ConsumeBool(), nullTable = in.ConsumeIntegralInRange<int>(0, 15) == 0;
  const bool sized = batch > 0 && maxBlocks > 0;
  std::vector<int32_t> table(size_t(sized ? batch * maxBlocks : 1)), lens(size_t(sized ? batch : 1));
  const int32_t hostileIds[] = {-1, INT32_MIN, INT32_MAX, int32_t(pool->numBlocks())};
  for (int32_t &id : table)
    id = in.ConsumeIntegralInRange<int>(0, 7) == 0
             ? hostileIds[in.ConsumeIntegralInRange<size_t>(0, std::size(hostileIds) - 1)]
             : in.ConsumeIntegralInRange<int32_t>(0, int32_t(std::max<int64_t>(pool->numBlocks() - 1, 0)));
  for (int32_t &len : lens)
    len = int32_t(std::clamp<int64_t>(pickCount(in, 140), INT32_MIN, INT32_MAX));

  auto expected = [&](const KvPool *p) {
    bool ok = sized && blockSize > 0 && !nullTable && split >= 0 && (!p || blockSize == bs()) &&
              maxBlocks <= INT64_MAX / blockSize;
    for (int64_t i = 0; ok && i < batch; ++i) {
      int64_t len = lens[size_t(i)];
      ok = len >= 0 && len <= maxBlocks * blockSize;
      for (int64_t b = split / blockSize; ok && b * blockSize < len; ++b)
        ok = table[size_t(i * maxBlocks + b)] >= 0 && !p; // no device tier: never launchable
    }
    return ok;
  };
  const int32_t *tablePtr = nullTable ? nullptr : table.data();
  const KvPool *checked = withPool ? pool.get() : nullptr;
  Status st = cuda::checkGpuBatch(checked, tablePtr, lens.data(), batch, maxBlocks, blockSize, split);
  FUZZ_CHECK(st.isOk() == expected(checked));
  if (!st.isOk())
    FUZZ_CHECK(st.code() == ErrorCode::kInvalidArgument);
  // The C ABI checks against the installed context's pool (this one, when a scheduler case
  // installed it).
  auto installed = installedContext();
  FUZZ_CHECK(hgrt_gpu_check_batch(tablePtr, lens.data(), batch, maxBlocks, blockSize, split) ==
             (expected(installed ? installed->pool() : nullptr) ? 1 : 0));
  // No array of this pool lives on a device, and pointers outside every array alias nothing.
  FUZZ_CHECK(hgrt_gpu_alias(pool->kBase(0)) == nullptr);
  FUZZ_CHECK(hgrt_gpu_alias(table.data()) == nullptr && hgrt_gpu_alias(nullptr) == nullptr);
}

void Harness::opsOnScheduler(FuzzedDataProvider &in, int op) {
  const int64_t segment = in.ConsumeIntegralInRange<int64_t>(-1, 3);
  switch (op) {
  case 0: { // a new context from a random config: validated, or refused
    SchedulerConfig cfg;
    cfg.policy = SchedulerPolicy(in.ConsumeIntegralInRange<int32_t>(0, 3));
    cfg.quantum = pickCount(in, 32);
    cfg.staticSplit = pickCount(in, 200);
    cfg.smoothing = in.ConsumeFloatingPointInRange<double>(-0.5, 1.5);
    cfg.damping = in.ConsumeFloatingPointInRange<double>(-0.5, 1.5);
    cfg.initialFraction = in.ConsumeFloatingPointInRange<double>(-0.5, 1.5);
    cfg.secondDeviceCapacityTokens = pickCount(in, 100);
    cfg.probeInterval = int32_t(pickCount(in, 20));
    cfg.prior.cpuPerToken = pickSeconds(in) * 1e-3;
    cfg.prior.gpuPerToken = pickSeconds(in) * 1e-4;
    cfg.prior.gpuFixed = pickSeconds(in);
    auto made = SchedulerContext::create(cfg, pool.get());
    FUZZ_CHECK(made.isOk() == cfg.validate().isOk());
    // An unvalidated scheduler must still stay defined and in range (UBSan watches the math).
    Scheduler raw(cfg);
    int64_t ctxTokens = pickCount(in, 5000);
    int64_t s = raw.split(segment, ctxTokens);
    FUZZ_CHECK(cfg.policy == SchedulerPolicy::kStatic || ctxTokens <= 0 || (s >= 0 && s <= ctxTokens));
    if (made.isOk()) {
      ctx = *made;
      if (in.ConsumeBool())
        installContext(ctx);
    }
    break;
  }
  case 1: // one bracketed run, through the C ABI when installed
    if (ctx) {
      ctx->beginStep(pickCount(in, 300));
      int64_t split = hgrt_split_point(segment);
      FUZZ_CHECK(split >= 0);
      hgrt_segment_begin(segment);
      int32_t device = in.ConsumeIntegralInRange<int32_t>(-1, 2);
      hgrt_device_begin(segment, device);
      hgrt_device_end(segment, device);
      if (in.ConsumeBool())
        ctx->recordDeviceTime(segment, device, pickSeconds(in));
      ctx->recordTransfer(segment, pickSeconds(in));
      hgrt_segment_end(segment);
      auto moved = ctx->endStep(); // rebalances the pool toward the split: data must survive
      FUZZ_CHECK(moved.isOk());
    }
    break;
  case 2: // direct feedback, NaN and negative times included
    if (ctx) {
      SegmentTiming t;
      t.cpuSeconds = pickSeconds(in);
      t.gpuSeconds = pickSeconds(in);
      t.transferSeconds = pickSeconds(in);
      t.contextTokens = pickCount(in, 4000);
      t.splitUsed = pickCount(in, 4000);
      ctx->recordSegment(segment, t);
      CostModel m = ctx->estimate(segment);
      FUZZ_CHECK(!std::isnan(m.cpuPerToken) && !std::isnan(m.gpuPerToken));
      FUZZ_CHECK(ctx->splitPoint(segment) >= 0);
    }
    break;
  default: // uninstall; calls with nothing installed are harmless
    uninstallContext();
    FUZZ_CHECK(hgrt_split_point(segment) == INT64_MAX);
    hgrt_segment_end(segment);
    break;
  }
}

/// Tier config text from the input: parsing must return, and accepted tiers must be sane.
void fuzzConfig(FuzzedDataProvider &in) {
  DiscoverOptions o;
  o.probeBandwidth = false;
  std::string text = in.ConsumeRandomLengthString(200);
  auto topo = Topology::fromConfig(text, o);
  if (topo.isOk())
    for (const TierInfo &t : topo->tiers())
      FUZZ_CHECK(t.capacityBytes > 0 && std::isfinite(t.readGBs) && t.readGBs > 0 && t.numaNode >= -1);
  (void)parseByteSize(text);
}

/// The token sampler on hostile options and logits (NaN, +-inf, huge, ties): it errs or returns a
/// token the filtered distribution holds, and that distribution is a proper one.
void fuzzSampler(FuzzedDataProvider &in) {
  static const double odd[] = {std::nan(""), std::numeric_limits<double>::infinity(), -1, 0, 1e-300,
                               1e300, 0.5, 1, 2};
  auto value = [&](double lo, double hi) {
    return in.ConsumeBool() ? odd[in.ConsumeIntegralInRange<size_t>(0, std::size(odd) - 1)]
                            : in.ConsumeFloatingPointInRange<double>(lo, hi);
  };
  model::SamplingOptions o;
  o.temperature = in.ConsumeBool() ? 0 : value(0, 4);
  o.topK = in.ConsumeIntegralInRange<int64_t>(-1, 40);
  o.topP = in.ConsumeBool() ? 1 : value(0, 1);
  o.minP = in.ConsumeBool() ? 0 : value(0, 1);
  o.repetitionPenalty = in.ConsumeBool() ? 1 : value(0, 3);
  o.seed = in.ConsumeIntegral<uint64_t>();
  const int64_t batch = in.ConsumeIntegralInRange<int64_t>(0, 3);
  const int64_t vocab = in.ConsumeIntegralInRange<int64_t>(0, 64);
  auto sampler = model::Sampler::create(o, batch, vocab);
  const bool valid = std::isfinite(o.temperature) && o.temperature >= 0 && o.topK >= 0 &&
                     o.topP > 0 && o.topP <= 1 && o.minP >= 0 && o.minP <= 1 &&
                     std::isfinite(o.repetitionPenalty) && o.repetitionPenalty > 0 && batch >= 1 &&
                     vocab >= 1;
  FUZZ_CHECK(sampler.isOk() == valid);
  if (!valid)
    return;
  static const float special[] = {std::nanf(""), std::numeric_limits<float>::infinity(),
                                   -std::numeric_limits<float>::infinity(), 3.4e38f, -3.4e38f, 0, 1};
  for (int step = 0; step < 4 && in.remaining_bytes() > 0; ++step) {
    std::vector<int32_t> seen(size_t(in.ConsumeIntegralInRange<int>(0, 3)));
    for (int32_t &t : seen)
      t = in.ConsumeIntegralInRange<int32_t>(-1, int32_t(vocab));
    const int64_t seq = in.ConsumeIntegralInRange<int64_t>(-1, batch);
    bool seenOk = seq >= 0 && seq < batch;
    for (int32_t t : seen)
      seenOk = seenOk && t >= 0 && t < vocab;
    FUZZ_CHECK(sampler->observe(seq, seen.data(), int64_t(seen.size())).isOk() == seenOk);
    std::vector<float> logits(size_t(batch * vocab));
    bool bad = false;
    for (size_t i = 0; i < logits.size(); ++i) {
      logits[i] = in.ConsumeIntegralInRange<int>(0, 7) == 0
                      ? special[in.ConsumeIntegralInRange<size_t>(0, std::size(special) - 1)]
                      : float(in.ConsumeIntegralInRange<int>(-8, 8)) * 0.5f;
      bad = bad || std::isnan(logits[i]) || logits[i] == std::numeric_limits<float>::infinity();
    }
    for (int64_t b = 0; b < batch; ++b) {
      bool anyFinite = false;
      for (int64_t v = 0; v < vocab; ++v)
        anyFinite = anyFinite || std::isfinite(logits[size_t(b * vocab + v)]);
      bad = bad || !anyFinite;
    }
    std::vector<std::set<int32_t>> reachable(static_cast<size_t>(batch));
    for (int64_t b = 0; b < batch && !bad; ++b) {
      auto dist = sampler->distribution(b, logits.data() + b * vocab);
      FUZZ_CHECK(dist.isOk() && !dist->empty());
      double sum = 0;
      for (size_t i = 0; i < dist->size(); ++i) {
        const auto [token, p] = (*dist)[i];
        FUZZ_CHECK(token >= 0 && token < vocab && p > 0 && p <= 1 + 1e-12);
        FUZZ_CHECK(i == 0 || token > (*dist)[i - 1].first);
        FUZZ_CHECK(std::isfinite(logits[size_t(b * vocab + token)]));
        reachable[size_t(b)].insert(token);
        sum += p;
      }
      FUZZ_CHECK(std::fabs(sum - 1) < 1e-9);
      FUZZ_CHECK(o.greedy() ? dist->size() == 1
                            : (o.topK == 0 || dist->size() <= size_t(o.topK)));
    }
    auto picked = sampler->next(logits.data());
    FUZZ_CHECK(picked.isOk() == !bad);
    for (int64_t b = 0; b < batch && !bad; ++b) {
      FUZZ_CHECK(reachable[size_t(b)].count((*picked)[size_t(b)]) == 1);
    }
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  FuzzedDataProvider in(data, size);
  switch (in.ConsumeIntegralInRange<int>(0, 15)) {
  case 0:
    fuzzConfig(in);
    return 0;
  case 1:
    fuzzSampler(in);
    return 0;
  default:
    break;
  }
  PoolConfig pc;
  pc.numLayers = in.ConsumeIntegralInRange<int32_t>(1, 3);
  pc.layout.kvHeads = in.ConsumeIntegralInRange<int32_t>(1, 3);
  pc.layout.blockSize = in.ConsumeBool() ? 16 : 32;
  pc.layout.headDim = in.ConsumeIntegralInRange<int32_t>(1, 8);
  pc.layout.dtype = DType(in.ConsumeIntegralInRange<int32_t>(0, 2));
  pc.hugePages = false;
  const uint64_t perBlock = 2ull * uint64_t(pc.numLayers) * pc.layout.blockBytes();
  std::string cfg;
  const char *kinds[] = {"hbm", "dram", "cxl"};
  // One to three tiers: every tier after the first starts on a huge-page-aligned block id, and the
  // bookkeeping of those gap ids dominates the cost of a pool this small, so fewer tiers run faster.
  const int tiers = in.ConsumeIntegralInRange<int>(1, 3);
  const int firstKind = in.ConsumeIntegralInRange<int>(0, 3 - tiers); // e.g. dram + cxl, no hbm
  for (int t = 0; t < tiers; ++t) {
    uint64_t blocks = in.ConsumeIntegralInRange<uint64_t>(0, 12);
    uint64_t cap = blocks * perBlock + in.ConsumeIntegralInRange<uint64_t>(blocks ? 0 : 1, perBlock - 1);
    const int k = firstKind + t;
    cfg += std::string("name=") + kinds[k] + ",kind=" + kinds[k] + (k ? ",node=0" : "") +
           ",bandwidth=" + std::to_string(10 * (3 - k)) + ",capacity=" + std::to_string(cap) + ";";
    pc.maxBlocksPerTier.push_back(in.ConsumeIntegralInRange<int64_t>(-1, 12));
  }
  DiscoverOptions o;
  o.probeBandwidth = false;
  auto topo = Topology::fromConfig(cfg, o);
  FUZZ_CHECK(topo.isOk());
  auto pool = KvPool::create(*topo, pc);
  if (!pool.isOk()) {
    FUZZ_CHECK(pool.status().code() == ErrorCode::kInvalidArgument); // every tier below one block
    return 0;
  }
  Harness h;
  h.pool = std::move(pool).valueOrThrow();
  h.tokenBytes = size_t(pc.layout.kvHeads) * pc.layout.rowBytes();
  for (int i = 0; i < kMaxOps && in.remaining_bytes() > 0; ++i) {
    int op = in.ConsumeIntegralInRange<int>(0, 15);
    if (op <= 10)
      h.opsOnPool(in, op);
    else if (op <= 14)
      h.opsOnScheduler(in, op - 11);
    else
      h.opsOnGpuChecks(in);
    const bool movesData = op == 6 || op == 8 || op == 12; // migrate, rebalance, end of a step
    h.verify(movesData || i % 8 == 7);
  }
  h.verify(true);
  uninstallContext(); // the context points at this pool: never let it outlive the input
  return 0;
}
