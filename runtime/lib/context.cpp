// SchedulerContext: timing brackets -> scheduler feedback + trace; the process-global installed slot.
#include "hybridgen/runtime/context.h"

#include <algorithm>
#include <climits>

namespace hybridgen::rt {

namespace {
std::mutex gInstallMu;
std::shared_ptr<SchedulerContext> gInstalled;
} // namespace

void installContext(std::shared_ptr<SchedulerContext> ctx) {
  std::lock_guard<std::mutex> lock(gInstallMu);
  gInstalled = std::move(ctx);
}

void uninstallContext() { installContext(nullptr); }

std::shared_ptr<SchedulerContext> installedContext() {
  std::lock_guard<std::mutex> lock(gInstallMu);
  return gInstalled; // a copy: the context outlives any call in flight even if uninstalled meanwhile
}

SchedulerContext::SchedulerContext(SchedulerConfig cfg, KvPool *pool, PlacementConfig placement)
    : sched_(cfg), pool_(pool), placement_(placement) {
  if (pool_) {
    std::vector<std::string> names;
    for (const auto &t : pool_->topology().tiers())
      names.push_back(t.name + (t.emulated ? "_emulated" : ""));
    trace_.setTierNames(std::move(names));
    lastMigrations_ = pool_->migrationsTotal();
    (void)pool_->setAppendTierOrder(placement_.appendOrder(pool_->topology()));
  }
}

Result<std::shared_ptr<SchedulerContext>> SchedulerContext::create(SchedulerConfig cfg, KvPool *pool,
                                                                   PlacementConfig placement) {
  Status s = cfg.validate();
  if (s)
    s = placement.validate();
  if (!s)
    return s;
  return std::make_shared<SchedulerContext>(cfg, pool, placement);
}

void SchedulerContext::beginStep(int64_t contextTokens) {
  std::lock_guard<std::mutex> lock(mu_);
  contextTokens_ = std::max<int64_t>(contextTokens, 0); // a negative length means no length: 0
  ++step_;
}

Result<int64_t> SchedulerContext::endStep() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!pool_ || pinnedSplit_ >= 0)
    return int64_t(0); // placeForStep placed this step's blocks before it ran
  return placement_.rebalance(*pool_, currentSplit_);
}

Result<bool> SchedulerContext::placeExactlyLocked(int64_t split, int64_t &migrations) {
  PlacementConfig unbounded = placement_.config();
  unbounded.maxMigrationsPerStep = INT64_MAX;
  // One pass skips moves into a tier that is still full; a later one finds the room made.
  for (int round = 0; round < 8; ++round) {
    Result<int64_t> moved = PlacementPolicy(unbounded).rebalance(*pool_, split);
    if (!moved)
      return moved.status();
    migrations += *moved;
    if (*moved == 0)
      break;
  }
  const int64_t bs = pool_->layout().blockSize;
  for (int64_t seq : pool_->sequences()) {
    const std::vector<int32_t> &blocks = pool_->blockTable(seq);
    for (size_t b = 0; b < blocks.size(); ++b) {
      const bool gpuSide = int64_t(b) >= split / bs; // splits are whole blocks (quantum)
      if (pool_->tierMemory(pool_->tierOfBlock(blocks[b])).onDevice() != gpuSide)
        return false;
    }
  }
  return true;
}

Result<int64_t> SchedulerContext::placeForStep(int64_t leadSegment) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!pool_)
    return invalidArgument("placeForStep: no pool attached");
  int64_t len = contextTokens_;
  for (int64_t s : pool_->sequences())
    len = std::max(len, pool_->seqLen(s));
  int64_t split = sched_.config().policy != SchedulerPolicy::kStatic && len <= 0
                      ? INT64_MAX
                      : sched_.split(leadSegment, len);
  const int64_t bs = pool_->layout().blockSize;
  if (split != INT64_MAX && split % bs != 0)
    split = (split / bs + 1) * bs; // a block belongs to one side: round the GPU's share down
  int64_t migrations = 0;
  Result<bool> placed = placeExactlyLocked(split, migrations);
  if (!placed)
    return placed.status();
  if (!*placed) {
    split = INT64_MAX; // device memory could not take the GPU's share: this step on the CPU
    placed = placeExactlyLocked(split, migrations);
    if (!placed)
      return placed.status();
    if (!*placed)
      return exhausted("placeForStep: host tiers cannot take every block back from device memory");
  }
  pinnedSplit_ = split;
  currentSplit_ = split;
  return migrations;
}

Result<int64_t> SchedulerContext::placeAllOnHost() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!pool_)
    return invalidArgument("placeAllOnHost: no pool attached");
  int64_t migrations = 0;
  Result<bool> placed = placeExactlyLocked(INT64_MAX, migrations);
  if (!placed)
    return placed.status();
  if (!*placed)
    return exhausted("placeAllOnHost: host tiers cannot take every block back from device memory");
  pinnedSplit_ = INT64_MAX;
  currentSplit_ = INT64_MAX;
  return migrations;
}

int64_t SchedulerContext::step() const {
  std::lock_guard<std::mutex> lock(mu_);
  return step_;
}

int64_t SchedulerContext::splitPoint(int64_t segment) {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t len = contextTokens_;
  if (len <= 0 && pool_)
    for (int64_t s : pool_->sequences())
      len = std::max(len, pool_->seqLen(s));
  int64_t split;
  if (pinnedSplit_ >= 0)
    split = pinnedSplit_; // placeForStep placed this split: the kernels must run at it
  else if (sched_.config().policy != SchedulerPolicy::kStatic && len <= 0)
    split = INT64_MAX; // no length known: the contract's "everything on the first device"
  else
    split = sched_.split(segment, len);
  runs_[segment].split = split;
  currentSplit_ = split;
  return split;
}

void SchedulerContext::segmentBegin(int64_t segment) {
  std::lock_guard<std::mutex> lock(mu_);
  Run &r = runs_[segment];
  int64_t split = r.split;
  r = Run{};
  r.split = split;
  r.active = true;
  r.begin = Clock::now();
}

void SchedulerContext::deviceBegin(int64_t segment, int32_t device) {
  if (device < 0 || device > 1)
    return;
  std::lock_guard<std::mutex> lock(mu_);
  runs_[segment].devBegin[device] = Clock::now();
}

void SchedulerContext::deviceEnd(int64_t segment, int32_t device) {
  if (device < 0 || device > 1)
    return;
  std::lock_guard<std::mutex> lock(mu_);
  Run &r = runs_[segment];
  r.dev[device] += std::chrono::duration<double>(Clock::now() - r.devBegin[device]).count();
}

void SchedulerContext::recordDeviceTime(int64_t segment, int32_t device, double seconds) {
  if (device < 0 || device > 1)
    return;
  std::lock_guard<std::mutex> lock(mu_);
  runs_[segment].dev[device] = seconds;
}

void SchedulerContext::setDeviceTimeModel(int32_t device,
                                          std::function<double(int64_t tokens)> seconds) {
  if (device < 0 || device > 1)
    return;
  std::lock_guard<std::mutex> lock(mu_);
  deviceModel_[device] = std::move(seconds);
}

void SchedulerContext::recordTransfer(int64_t segment, double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  runs_[segment].transfer += seconds;
}

void SchedulerContext::segmentEnd(int64_t segment) {
  std::lock_guard<std::mutex> lock(mu_);
  Run &r = runs_[segment];
  if (!r.active)
    return; // an end without a begin teaches nothing
  r.active = false;
  SegmentTiming t;
  t.cpuSeconds = r.dev[0];
  t.gpuSeconds = r.dev[1];
  t.transferSeconds = r.transfer;
  t.contextTokens = contextTokens_;
  t.splitUsed = std::min(r.split, contextTokens_);
  modelledDevices_ = 0;
  if (deviceModel_[0]) {
    t.cpuSeconds = deviceModel_[0](t.splitUsed);
    modelledDevices_ |= 1;
  }
  if (deviceModel_[1]) {
    t.gpuSeconds = deviceModel_[1](t.contextTokens - t.splitUsed);
    modelledDevices_ |= 2;
  }
  finishLocked(segment, t, std::chrono::duration<double>(Clock::now() - r.begin).count());
}

void SchedulerContext::recordSegment(int64_t segment, const SegmentTiming &t) {
  std::lock_guard<std::mutex> lock(mu_);
  finishLocked(segment, t, 0);
}

void SchedulerContext::finishLocked(int64_t segment, const SegmentTiming &t, double segmentSeconds) {
  sched_.observe(segment, t);
  TraceRow row;
  row.step = step_;
  row.segment = segment;
  row.contextTokens = t.contextTokens;
  row.split = t.splitUsed;
  row.cpuSeconds = t.cpuSeconds;
  row.gpuSeconds = t.gpuSeconds;
  row.transferSeconds = t.transferSeconds;
  row.segmentSeconds = segmentSeconds;
  row.modelledDevices = modelledDevices_;
  modelledDevices_ = 0;
  if (pool_) {
    row.migrations = pool_->migrationsTotal() - lastMigrations_;
    lastMigrations_ = pool_->migrationsTotal();
    for (int32_t i = 0; i < pool_->topology().tierCount(); ++i)
      row.tierBlocks.push_back(pool_->tierUsage(i).usedBlocks);
  }
  trace_.add(std::move(row));
}

Trace SchedulerContext::trace() const {
  std::lock_guard<std::mutex> lock(mu_);
  return trace_;
}

TraceRow SchedulerContext::lastTraceRow() const {
  std::lock_guard<std::mutex> lock(mu_);
  return trace_.size() ? trace_.rows().back() : TraceRow{};
}

CostModel SchedulerContext::estimate(int64_t segment) const {
  std::lock_guard<std::mutex> lock(mu_);
  return sched_.estimate(segment);
}

int64_t SchedulerContext::lastSplit(int64_t segment) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = runs_.find(segment);
  return it == runs_.end() ? 0 : it->second.split;
}

} // namespace hybridgen::rt
