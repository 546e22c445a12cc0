// ModelRunner: one step = embed, then per layer layer_pre -> KV write into the pool ->
// layer_decode/layer_prefill, then final; decode steps are bracketed for the split scheduler.
#include "runner_impl.h"

#include <algorithm>
#include <chrono>
#include <cstring>

namespace hybridgen::rt::model {
namespace {

using memref_call::Arg;
using memref_call::ElemType;
using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

} // namespace

std::vector<Arg> buildArgs(const BoundFunction &fn, int32_t layer,
                           const std::map<std::string, Arg> &buffers) {
  const std::vector<Arg> &weights = fn.weights[fn.weights.size() == 1 ? 0 : size_t(layer)];
  std::vector<Arg> args(fn.args.size());
  for (size_t i = 0; i < fn.args.size(); ++i) {
    if (weights[i].data) {
      args[i] = weights[i];
      continue;
    }
    auto it = buffers.find(fn.args[i]);
    if (it == buffers.end())
      throw std::invalid_argument(fn.name + ": the runner has no buffer '" + fn.args[i] + "'");
    args[i] = it->second;
  }
  return args;
}

ModelRunner::ModelRunner(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ModelRunner::~ModelRunner() {
  if (installedContext() == impl_->scheduler)
    uninstallContext();
}

const ModelConfig &ModelRunner::config() const { return impl_->config; }
const std::string &ModelRunner::configJson() const { return impl_->configJson; }
int32_t ModelRunner::batch() const { return impl_->options.batch; }
const std::string &ModelRunner::kvDtype() const { return impl_->kvDtype; }

std::vector<int64_t> ModelRunner::sequenceLengths() const {
  std::vector<int64_t> out;
  for (int64_t s : impl_->sequences)
    out.push_back(impl_->pool->seqLen(s));
  return out;
}

Status ModelRunner::reset() {
  Impl &m = *impl_;
  for (int64_t &s : m.sequences) {
    Status st = m.pool->freeSequence(s);
    if (!st)
      return st;
    s = m.pool->createSequence();
  }
  m.sameHistory = true;
  RunnerStats kept = m.stats;
  m.stats = RunnerStats();
  m.stats.policy = kept.policy;
  m.stats.gpuSide = kept.gpuSide;
  m.stats.kvCommittedBytes = kept.kvCommittedBytes;
  m.stats.kvCommitSeconds = kept.kvCommitSeconds;
  return Status::ok();
}

Status ModelRunner::truncate(int64_t length) {
  Impl &m = *impl_;
  for (int64_t s : m.sequences)
    if (length < 0 || length > m.pool->seqLen(s))
      return invalidArgument("truncate: cannot keep " + std::to_string(length) +
                             " tokens of a sequence that holds " +
                             std::to_string(m.pool->seqLen(s)));
  for (int64_t s : m.sequences) {
    Status st = m.pool->truncateSequence(s, length);
    if (!st)
      return st; // cannot happen after the checks above
  }
  return Status::ok();
}

namespace {

/// One step over |T| new tokens of each sequence in |seqs| (every sequence, or the first alone
/// for a shared prefill): |decode| uses layer_decode (split attention, scheduler bracketing), else
/// layer_prefill. Fills |logits| for the last token of each ([seqs][vocab]) or for every token
/// ([seqs][T][vocab]) with |allLogits|.
Status runStep(ModelRunner::Impl &m, const std::vector<int64_t> &seqs, const int32_t *ids,
               int64_t T, bool decode, bool allLogits, std::vector<float> &logits) {
  const ModelConfig &c = m.config;
  const int64_t B = int64_t(seqs.size()), n = B * T, H = c.hidden;
  KvPool &pool = *m.pool;
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= c.vocab)
      return invalidArgument("token id " + std::to_string(ids[i]) + " at index " +
                             std::to_string(i) + " is outside the vocabulary [0, " +
                             std::to_string(c.vocab) + ")");
  for (int64_t s : seqs) {
    int64_t len = pool.seqLen(s) + T;
    if (len > m.options.maxContext)
      return invalidArgument("a sequence would hold " + std::to_string(len) +
                             " tokens, more than max_context (" +
                             std::to_string(m.options.maxContext) + ")");
    if (!c.rope && len > c.maxPositions)
      return invalidArgument("a sequence would hold " + std::to_string(len) +
                             " tokens, more than the learned positions of the model (" +
                             std::to_string(c.maxPositions) + ")");
  }
  m.positions.resize(size_t(n));
  std::vector<int64_t> starts;
  for (int64_t b = 0; b < B; ++b) {
    Result<int64_t> start = pool.appendTokens(seqs[size_t(b)], T);
    if (!start)
      return start.status();
    starts.push_back(*start);
    for (int64_t t = 0; t < T; ++t)
      m.positions[size_t(b * T + t)] = int32_t(*start + t);
  }
  // With KV in device memory, place every block on its side before the step (block ids move, so
  // before the table is filled): decode at one split for all layers, prefill (CPU-only kernels,
  // which read the whole cache) with everything in host memory.
  bool stepBegun = false;
  if (m.deviceTier) {
    Result<int64_t> placed = int64_t(0);
    if (decode) {
      int64_t longest = 0;
      for (int64_t s : seqs)
        longest = std::max(longest, pool.seqLen(s));
      m.scheduler->beginStep(longest);
      stepBegun = true;
      placed = m.scheduler->placeForStep(0);
    } else {
      placed = m.scheduler->placeAllOnHost();
    }
    if (!placed)
      return placed.status();
  }
  int32_t maxBlocks = pool.maxBlocksInUse(seqs);
  m.table.assign(size_t(B) * size_t(maxBlocks), -1);
  m.lens.assign(size_t(B), 0);
  Status filled = pool.fillBatch(seqs, maxBlocks, m.table.data(), m.lens.data());
  if (!filled)
    return filled;
  int64_t maxLen = *std::max_element(m.lens.begin(), m.lens.end());

  m.x.resize(size_t(n * H));
  m.q.resize(size_t(n * c.qDim()));
  m.k.resize(size_t(n * c.kvDim()));
  m.v.resize(size_t(n * c.kvDim()));
  ElemType poolType = m.kvDtype == "f32"    ? ElemType::f32
                      : m.kvDtype == "f16" ? ElemType::f16
                                           : ElemType::bf16;
  std::vector<int64_t> poolShape = {pool.numBlocks(), c.kvHeads, m.blockSize, c.headDim};
  std::map<std::string, Arg> buf = {
      {"ids", {const_cast<int32_t *>(ids), ElemType::i32, {n}, {}}},
      {"positions", {m.positions.data(), ElemType::i32, {n}, {}}},
      {"x", {m.x.data(), ElemType::f32, {n, H}, {}}},
      {"q", {m.q.data(), ElemType::f32, {n, c.qDim()}, {}}},
      {"k", {m.k.data(), ElemType::f32, {n, c.kvDim()}, {}}},
      {"v", {m.v.data(), ElemType::f32, {n, c.kvDim()}, {}}},
      {"block_table", {m.table.data(), ElemType::i32, {B, maxBlocks}, {}}},
      {"seq_lens", {m.lens.data(), ElemType::i32, {B}, {}}},
      {"layer", {m.layerId.data(), ElemType::i64, {1}, {}}},
  };
  if (!decode) {
    // Prefill's attention reads q and writes its output as [batch, T, q_dim] views.
    m.attn.resize(size_t(n * c.qDim()));
    buf["q_chunks"] = {m.q.data(), ElemType::f32, {B, T, c.qDim()}, {}};
    buf["attn"] = {m.attn.data(), ElemType::f32, {n, c.qDim()}, {}};
    buf["attn_chunks"] = {m.attn.data(), ElemType::f32, {B, T, c.qDim()}, {}};
  }
  const BoundFunction &post = decode ? m.layerDecode : m.layerPrefill;
  // The C ABI reads one process-global scheduler: make it this model's for this step.
  if (installedContext() != m.scheduler)
    installContext(m.scheduler);
  try {
    m.library->call("embed", buildArgs(m.embed, 0, buf));
    if (decode && !stepBegun)
      m.scheduler->beginStep(maxLen);
    for (int32_t l = 0; l < int32_t(c.layers); ++l) {
      m.library->call("layer_pre", buildArgs(m.layerPre, l, buf));
      // The runtime owns every KV write: the pool decides where the new tokens live.
      size_t rowElems = size_t(c.kvDim());
      for (int64_t b = 0; b < B; ++b) {
        const float *kp = m.k.data() + size_t(b * T) * rowElems;
        const float *vp = m.v.data() + size_t(b * T) * rowElems;
        Status w;
        if (poolType == ElemType::f32) {
          w = pool.writeTokens(seqs[size_t(b)], l, starts[size_t(b)], T, kp, vp);
        } else {
          size_t count = size_t(T) * rowElems;
          m.kvStage16.resize(2 * count);
          uint16_t (*narrow)(float) = poolType == ElemType::f16 ? f32ToF16 : f32ToBf16;
          for (size_t i = 0; i < count; ++i) {
            m.kvStage16[i] = narrow(kp[i]);
            m.kvStage16[count + i] = narrow(vp[i]);
          }
          w = pool.writeTokens(seqs[size_t(b)], l, starts[size_t(b)], T,
                               m.kvStage16.data(), m.kvStage16.data() + count);
        }
        if (!w)
          return w;
      }
      buf["k_pool"] = {pool.kBase(l), poolType, poolShape, {}};
      buf["v_pool"] = {pool.vBase(l), poolType, poolShape, {}};
      m.layerId[0] = l;
      m.library->call(post.name, buildArgs(post, l, buf));
      if (!m.layerMlp.name.empty())
        m.library->call(m.layerMlp.name, buildArgs(m.layerMlp, l, buf));
    }
    if (decode) {
      Result<int64_t> migrated = m.scheduler->endStep();
      if (!migrated)
        return migrated.status();
    }
    // Logits of every row, or of each sequence's last row only.
    int64_t rows = allLogits ? n : B;
    std::vector<float> last;
    Arg xArg = buf["x"];
    if (!allLogits && T > 1) {
      last.resize(size_t(B * H));
      for (int64_t b = 0; b < B; ++b)
        std::memcpy(last.data() + b * H, m.x.data() + size_t((b * T + T - 1) * H),
                    size_t(H) * sizeof(float));
      xArg = {last.data(), ElemType::f32, {B, H}, {}};
    }
    logits.resize(size_t(rows * c.vocab));
    std::map<std::string, Arg> finalBuf = {
        {"x", xArg}, {"logits", {logits.data(), ElemType::f32, {rows, c.vocab}, {}}}};
    m.library->call("final", buildArgs(m.final, 0, finalBuf));
  } catch (const std::exception &e) {
    return invalidArgument(std::string("model step failed: ") + e.what());
  }
  return Status::ok();
}

/// Whether the |B| rows of |ids| ([B][T]) are all the same.
bool sameRows(const int32_t *ids, int64_t B, int64_t T) {
  for (int64_t b = 1; b < B; ++b)
    if (std::memcmp(ids, ids + b * T, size_t(T) * sizeof(int32_t)) != 0)
      return false;
  return true;
}

/// A shared prefill's copy: the last |T| tokens of the first sequence, every layer's K and V,
/// appended to each other sequence (which held what the first held before them).
Status copyLastTokens(ModelRunner::Impl &m, int64_t T) {
  KvPool &pool = *m.pool;
  const int64_t from = m.sequences[0], at = pool.seqLen(from) - T;
  const size_t bytes = size_t(T) * size_t(pool.layout().kvHeads) * pool.layout().rowBytes();
  std::vector<uint8_t> k(bytes), v(bytes);
  for (size_t b = 1; b < m.sequences.size(); ++b) {
    Result<int64_t> pos = pool.appendTokens(m.sequences[b], T);
    if (!pos)
      return pos.status();
    for (int32_t l = 0; l < int32_t(m.config.layers); ++l) {
      Status s = pool.readTokens(from, l, at, T, k.data(), v.data());
      if (s)
        s = pool.writeTokens(m.sequences[b], l, *pos, T, k.data(), v.data());
      if (!s)
        return s;
    }
  }
  return Status::ok();
}

} // namespace

Status ModelRunner::prefill(const int32_t *ids, int64_t T, bool allLogits,
                            std::vector<float> &logits, const ProgressFn &progress) {
  Impl &m = *impl_;
  if (T < 1)
    return invalidArgument("prefill needs at least one token per sequence");
  if (!m.hasPrefill)
    return invalidArgument(m.artifactDir + " was compiled without prefill");
  const int64_t B = m.options.batch, V = m.config.vocab, chunk = m.options.prefillChunk;
  // Sequences that hold the same tokens and get the same new ones (a batch sampling several
  // answers to one prompt) are computed once: the first alone, its KV then copied to the others.
  const bool shared = B > 1 && m.sameHistory && sameRows(ids, B, T);
  m.sameHistory = shared;
  const std::vector<int64_t> first = {m.sequences[0]};
  const std::vector<int64_t> &run = shared ? first : m.sequences;
  const int64_t R = int64_t(run.size());
  auto start = Clock::now();
  std::vector<int32_t> chunkIds;
  std::vector<float> chunkLogits;
  if (allLogits)
    logits.assign(size_t(B * T * V), 0.0f);
  for (int64_t done = 0; done < T; done += chunk) {
    int64_t len = std::min(chunk, T - done);
    chunkIds.resize(size_t(R * len));
    for (int64_t b = 0; b < R; ++b)
      std::memcpy(chunkIds.data() + b * len, ids + b * T + done, size_t(len) * sizeof(int32_t));
    std::vector<float> &out = allLogits || shared ? chunkLogits : logits;
    Status s = runStep(m, run, chunkIds.data(), len, /*decode=*/false, allLogits, out);
    if (s && shared)
      s = copyLastTokens(m, len);
    if (!s) {
      m.sameHistory = false; // some sequences may hold the chunk, others not
      return s;
    }
    if (allLogits) { // |out| is [R][len][V]; |logits| [B][T][V]
      for (int64_t b = 0; b < B; ++b)
        std::memcpy(logits.data() + size_t((b * T + done) * V),
                    out.data() + size_t((shared ? 0 : b) * len * V), size_t(len * V) * sizeof(float));
    } else if (shared) { // the first sequence's last logits are every sequence's
      logits.resize(size_t(B * V));
      for (int64_t b = 1; b < B; ++b)
        std::memcpy(logits.data() + size_t(b * V), out.data(), size_t(V) * sizeof(float));
      std::memcpy(logits.data(), out.data(), size_t(V) * sizeof(float));
    }
    if (progress)
      progress(done + len, T);
  }
  m.stats.prefillTokens += B * T;
  if (shared)
    m.stats.prefillSharedTokens += (B - 1) * T;
  m.stats.prefillSeconds += secondsSince(start);
  return Status::ok();
}

Status ModelRunner::decode(const int32_t *ids, std::vector<float> &logits) {
  Impl &m = *impl_;
  auto start = Clock::now();
  if (!sameRows(ids, m.options.batch, 1))
    m.sameHistory = false;
  Status s = runStep(m, m.sequences, ids, 1, /*decode=*/true, /*allLogits=*/false, logits);
  if (!s) {
    m.sameHistory = false;
    return s;
  }
  m.stats.decodeSeconds += secondsSince(start);
  m.stats.decodeTokens += m.options.batch;
  m.stats.decodeSteps += 1;
  return Status::ok();
}

Result<std::vector<std::vector<int32_t>>> ModelRunner::generate(const int32_t *ids, int64_t T,
                                                                int64_t maxNewTokens,
                                                                const SamplingOptions &sampling,
                                                                const TokenFn &onToken,
                                                                const ProgressFn &progress) {
  Impl &m = *impl_;
  const int64_t B = m.options.batch;
  std::vector<std::vector<int32_t>> out(static_cast<size_t>(B));
  if (maxNewTokens < 0)
    return invalidArgument("max_new_tokens must be >= 0");
  Result<Sampler> sampler = Sampler::create(sampling, B, m.config.vocab);
  if (!sampler)
    return sampler.status();
  for (int64_t b = 0; b < B && T > 0; ++b) {
    Status seen = sampler->observe(b, ids + size_t(b * T), T);
    if (!seen)
      return seen;
  }
  std::vector<float> logits;
  Status s = prefill(ids, T, false, logits, progress);
  if (!s)
    return s;
  std::vector<int32_t> next;
  for (int64_t i = 0; i < maxNewTokens; ++i) {
    if (i > 0) {
      s = decode(next.data(), logits);
      if (!s)
        return s;
    }
    Result<std::vector<int32_t>> picked = sampler->next(logits.data());
    if (!picked)
      return picked.status();
    next = std::move(*picked);
    for (int64_t b = 0; b < B; ++b)
      out[size_t(b)].push_back(next[size_t(b)]);
    if (onToken)
      onToken(next);
  }
  return out;
}

RunnerStats ModelRunner::stats() const {
  const Impl &m = *impl_;
  RunnerStats s = m.stats;
  s.splitPerLayer.clear();
  for (int64_t l = 0; l < m.config.layers; ++l)
    s.splitPerLayer.push_back(m.scheduler->lastSplit(l));
  const Topology &topo = m.pool->topology();
  for (int32_t t = 0; t < topo.tierCount(); ++t) {
    const TierInfo &tier = topo.tiers()[size_t(t)];
    s.tierNames.push_back(tier.name + (tier.emulated ? "_emulated" : ""));
    TierUsage u = m.pool->tierUsage(t);
    s.tierUsedBlocks.push_back(u.usedBlocks);
    s.tierCapacityBlocks.push_back(u.capacityBlocks);
  }
  s.migrations = m.pool->migrationsTotal();
  return s;
}

Status ModelRunner::fillSyntheticKv(int64_t tokens, uint64_t seed) {
  Impl &m = *impl_;
  KvPool &pool = *m.pool;
  const KvLayout &L = pool.layout();
  const int64_t chunk = 4096;
  m.sameHistory = false; // each sequence gets its own random K/V
  size_t rowElems = size_t(L.kvHeads) * size_t(L.headDim);
  std::vector<uint8_t> k(size_t(chunk) * rowElems * L.eltSize()), v(k.size());
  uint64_t state = seed * 0x9e3779b97f4a7c15ull + 1;
  auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return float(int64_t(state >> 40) % 2001 - 1000) / 1000.0f;
  };
  for (int64_t s : m.sequences) {
    if (pool.seqLen(s) + tokens > m.options.maxContext)
      return invalidArgument("synthetic context of " + std::to_string(tokens) +
                             " tokens exceeds max_context");
    for (int64_t done = 0; done < tokens; done += chunk) {
      int64_t n = std::min(chunk, tokens - done);
      Result<int64_t> pos = pool.appendTokens(s, n);
      if (!pos)
        return pos.status();
      for (int32_t l = 0; l < int32_t(m.config.layers); ++l) {
        size_t count = size_t(n) * rowElems;
        for (size_t i = 0; i < count; ++i) {
          float a = next(), b = next();
          if (L.dtype == DType::kF32) {
            reinterpret_cast<float *>(k.data())[i] = a;
            reinterpret_cast<float *>(v.data())[i] = b;
          } else {
            uint16_t (*narrow)(float) = L.dtype == DType::kF16 ? f32ToF16 : f32ToBf16;
            reinterpret_cast<uint16_t *>(k.data())[i] = narrow(a);
            reinterpret_cast<uint16_t *>(v.data())[i] = narrow(b);
          }
        }
        Status w = pool.writeTokens(s, l, *pos, n, k.data(), v.data());
        if (!w)
          return w;
      }
    }
  }
  return Status::ok();
}

uint64_t ModelRunner::weightBytesPerStep() const {
  const Impl &m = *impl_;
  std::map<const void *, uint64_t> seen;
  // |only|: count just that argument (embed reads its tables' few rows but all of project_in).
  auto add = [&](const BoundFunction &fn, const std::string &only = "") {
    for (const auto &layer : fn.weights)
      for (size_t i = 0; i < layer.size(); ++i) {
        const Arg &a = layer[i];
        if (!a.data || (!only.empty() && fn.args[i] != only))
          continue;
        uint64_t n = a.type == ElemType::f32 ? 4 : 2;
        for (int64_t d : a.shape)
          n *= uint64_t(d);
        seen[a.data] = n;
      }
  };
  add(m.embed, "tensor:model.decoder.project_in.weight");
  add(m.layerPre);
  add(m.layerDecode);
  add(m.layerMlp);
  add(m.final);
  uint64_t total = 0;
  for (const auto &entry : seen)
    total += entry.second;
  return total;
}

uint64_t ModelRunner::kvBytesPerStep() const {
  const Impl &m = *impl_;
  uint64_t tokens = 0;
  for (int64_t s : m.sequences)
    tokens += uint64_t(m.pool->seqLen(s));
  return tokens * 2 * uint64_t(m.config.layers) * m.pool->layout().kvHeads *
         m.pool->layout().rowBytes();
}

std::string ModelRunner::traceCsv() const { return impl_->scheduler->trace().toCsv(); }

} // namespace hybridgen::rt::model
