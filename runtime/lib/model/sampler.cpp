// Sampler: the next token of each sequence from its logits (see sampler.h). The filters run in
// Hugging Face's order: repetition penalty, temperature, top-k, top-p, min-p; the draw walks the
// kept tokens with one uniform number from the sequence's own stream, in double precision.
#include "hybridgen/runtime/model/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

namespace hybridgen::rt::model {
namespace {

/// Moves the top-p nucleus of |ids| to its front and returns its size: the fewest tokens, taken in
/// falling order of |w| (ties: lower id first), whose weights sum to >= |want|. A weighted
/// quickselect, O(n) expected: no sort of the row, which can be a 128K vocabulary with a wide
/// nucleus at a high temperature.
size_t moveNucleusToFront(std::vector<int32_t> &ids, const std::vector<double> &w, double want) {
  auto before = [&](int32_t a, int32_t b) {
    return w[size_t(a)] > w[size_t(b)] || (w[size_t(a)] == w[size_t(b)] && a < b);
  };
  size_t lo = 0, hi = ids.size(); // [0, lo) is in the nucleus; it ends inside [lo, hi)
  while (want > 0 && hi - lo > 1) {
    // Median of three as the pivot: a row in id order is not a bad case for it.
    int32_t a = ids[lo], b = ids[lo + (hi - lo) / 2], c = ids[hi - 1];
    int32_t pivot = before(a, b) ? (before(b, c) ? b : (before(a, c) ? c : a))
                                 : (before(a, c) ? a : (before(b, c) ? c : b));
    auto first = ids.begin() + std::ptrdiff_t(lo), last = ids.begin() + std::ptrdiff_t(hi);
    auto mid = std::partition(first, last, [&](int32_t t) { return before(t, pivot); });
    double upper = 0;
    for (auto it = first; it != mid; ++it)
      upper += w[size_t(*it)];
    if (upper >= want) {
      hi = size_t(mid - ids.begin()); // ends among the tokens before the pivot
      continue;
    }
    // All of those are in, then the pivot (the largest of the rest).
    want -= upper;
    lo = size_t(mid - ids.begin());
    std::iter_swap(ids.begin() + std::ptrdiff_t(lo), std::find(mid, last, pivot));
    want -= w[size_t(ids[lo])];
    ++lo;
  }
  // One token left whose weight is still wanted; or rounding left the whole row a hair short.
  return want > 0 ? std::min(lo + 1, ids.size()) : lo;
}

std::string num(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", v);
  return text;
}

} // namespace

Status SamplingOptions::validate() const {
  // Written as !(in range) so that NaN fails every check.
  if (!(temperature >= 0) || !std::isfinite(temperature))
    return invalidArgument("sampling: temperature must be a finite number >= 0 (0 is greedy), got " +
                           num(temperature));
  if (topK < 0)
    return invalidArgument("sampling: top_k must be >= 0 (0 keeps every token), got " +
                           std::to_string(topK));
  if (!(topP > 0 && topP <= 1))
    return invalidArgument("sampling: top_p must be in (0, 1] (1 keeps every token), got " + num(topP));
  if (!(minP >= 0 && minP <= 1))
    return invalidArgument("sampling: min_p must be in [0, 1] (0 keeps every token), got " + num(minP));
  if (!(repetitionPenalty > 0) || !std::isfinite(repetitionPenalty))
    return invalidArgument("sampling: repetition_penalty must be a finite number > 0 (1 is off), "
                           "got " + num(repetitionPenalty));
  return Status::ok();
}

Sampler::Sampler(const SamplingOptions &options, int64_t batch, int64_t vocab)
    : options_(options), batch_(batch), vocab_(vocab), streams_(size_t(batch)),
      seen_(size_t(batch)) {
  for (int64_t b = 0; b < batch; ++b) {
    // seed_seq's mixing is fixed by the standard, so a seed gives the same draws everywhere.
    std::seed_seq seq{uint32_t(options.seed), uint32_t(options.seed >> 32), uint32_t(b)};
    streams_[size_t(b)].seed(seq);
  }
}

Result<Sampler> Sampler::create(const SamplingOptions &options, int64_t batch, int64_t vocab) {
  Status s = options.validate();
  if (!s)
    return s;
  if (batch < 1 || vocab < 1 || vocab > std::numeric_limits<int32_t>::max())
    return invalidArgument("sampling: batch must be >= 1 and vocab in [1, 2^31), got batch " +
                           std::to_string(batch) + ", vocab " + std::to_string(vocab));
  return Sampler(options, batch, vocab);
}

Status Sampler::observe(int64_t seq, const int32_t *ids, int64_t n) {
  if (seq < 0 || seq >= batch_ || n < 0 || (n > 0 && !ids))
    return invalidArgument("sampling: observe(sequence " + std::to_string(seq) + ", " +
                           std::to_string(n) + " ids) is out of range for batch " +
                           std::to_string(batch_));
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= vocab_)
      return invalidArgument("sampling: token id " + std::to_string(ids[i]) + " is outside [0, " +
                             std::to_string(vocab_) + ")");
  if (options_.repetitionPenalty != 1)
    seen_[size_t(seq)].insert(ids, ids + n);
  return Status::ok();
}

Result<std::vector<int32_t>> Sampler::next(const float *logits) {
  if (!logits)
    return invalidArgument("sampling: no logits");
  std::vector<int32_t> out(static_cast<size_t>(batch_));
  for (int64_t b = 0; b < batch_; ++b) {
    Result<int32_t> t = pick(b, logits + size_t(b) * size_t(vocab_));
    if (!t)
      return t.status();
    out[size_t(b)] = *t;
    if (options_.repetitionPenalty != 1)
      seen_[size_t(b)].insert(*t);
  }
  return out;
}

Result<double> Sampler::filter(int64_t seq, const float *row) {
  const size_t V = size_t(vocab_);
  std::vector<double> &l = scratch_;
  l.assign(row, row + V);
  bool anyFinite = false;
  for (size_t i = 0; i < V; ++i) {
    if (std::isnan(l[i]) || l[i] == std::numeric_limits<double>::infinity())
      return invalidArgument("sampling: the logits of sequence " + std::to_string(seq) +
                             " hold " + (std::isnan(l[i]) ? "NaN" : "+inf") + " (token " +
                             std::to_string(i) + ")");
    anyFinite = anyFinite || std::isfinite(l[i]);
  }
  if (!anyFinite)
    return invalidArgument("sampling: every logit of sequence " + std::to_string(seq) + " is -inf");
  const double penalty = options_.repetitionPenalty;
  if (penalty != 1)
    for (int32_t t : seen_[size_t(seq)])
      l[size_t(t)] = l[size_t(t)] > 0 ? l[size_t(t)] / penalty : l[size_t(t)] * penalty;
  // Greedy: the first of the largest, as std::max_element picks it.
  size_t best = size_t(std::max_element(l.begin(), l.end()) - l.begin());
  if (options_.greedy()) {
    order_.assign(1, int32_t(best));
    l[best] = 1;
    return 1.0;
  }

  // Candidates: every token a draw can reach, in id order. Each filter finds the last token it
  // keeps (selection reorders a copy, |work_|) and keeps every candidate ranked no lower, so the
  // candidates stay in id order and the draw does not depend on how the library partitions.
  const double lmax = l[best], T = options_.temperature;
  std::vector<int32_t> &ids = order_, &work = work_;
  ids.clear();
  for (size_t i = 0; i < V; ++i)
    if (l[i] > -std::numeric_limits<double>::infinity())
      ids.push_back(int32_t(i));
  auto keepRankedUpTo = [&](int32_t last) { // l: the values |last| was ranked by
    auto below = [&](int32_t t) { return l[size_t(t)] < l[size_t(last)] ||
                                         (l[size_t(t)] == l[size_t(last)] && t > last); };
    ids.erase(std::remove_if(ids.begin(), ids.end(), below), ids.end());
  };
  if (options_.topK > 0 && size_t(options_.topK) < ids.size()) {
    work = ids;
    auto kth = work.begin() + std::ptrdiff_t(options_.topK - 1);
    std::nth_element(work.begin(), kth, work.end(), [&](int32_t a, int32_t b) {
      return l[size_t(a)] > l[size_t(b)] || (l[size_t(a)] == l[size_t(b)] && a < b);
    });
    keepRankedUpTo(*kth);
  }
  // l now holds weights. Divided, not multiplied by 1/T: a subnormal T has no finite inverse. A
  // token whose weight underflows to 0 cannot be drawn, so it is no candidate.
  for (int32_t i : ids)
    l[size_t(i)] = std::exp((l[size_t(i)] - lmax) / T);
  ids.erase(std::remove_if(ids.begin(), ids.end(), [&](int32_t i) { return !(l[size_t(i)] > 0); }),
            ids.end());
  auto mass = [&] {
    double sum = 0;
    for (int32_t i : ids)
      sum += l[size_t(i)];
    return sum;
  };
  double total = mass();
  if (options_.topP < 1) {
    work = ids;
    size_t n = moveNucleusToFront(work, l, options_.topP * total);
    int32_t last = work[0]; // the nucleus' lowest-ranked token
    for (size_t k = 1; k < n; ++k)
      if (l[size_t(work[k])] < l[size_t(last)] ||
          (l[size_t(work[k])] == l[size_t(last)] && work[k] > last))
        last = work[k];
    keepRankedUpTo(last);
    total = mass();
  }
  if (options_.minP > 0) {
    // The most likely token has weight 1 and is always kept, so |ids| never empties.
    ids.erase(std::remove_if(ids.begin(), ids.end(),
                             [&](int32_t i) { return l[size_t(i)] < options_.minP; }),
              ids.end());
    total = mass();
  }

  return total;
}

Result<int32_t> Sampler::pick(int64_t seq, const float *row) {
  Result<double> total = filter(seq, row);
  if (!total)
    return total.status();
  if (options_.greedy())
    return order_[0]; // no draw: greedy runs leave the stream where it was
  // 53 random bits: a uniform double in [0, 1) that does not depend on the standard library.
  const double u = double(streams_[size_t(seq)]() >> 11) * 0x1.0p-53 * *total;
  double acc = 0;
  for (int32_t i : order_) {
    acc += scratch_[size_t(i)];
    if (u < acc)
      return i;
  }
  return order_.back(); // u fell past the last partial sum by rounding
}

Result<std::vector<std::pair<int32_t, double>>> Sampler::distribution(int64_t seq,
                                                                      const float *row) {
  if (seq < 0 || seq >= batch_ || !row)
    return invalidArgument("sampling: distribution of sequence " + std::to_string(seq) +
                           " is out of range for batch " + std::to_string(batch_));
  Result<double> total = filter(seq, row);
  if (!total)
    return total.status();
  std::vector<std::pair<int32_t, double>> out;
  for (int32_t i : order_)
    out.emplace_back(i, scratch_[size_t(i)] / *total);
  return out;
}

} // namespace hybridgen::rt::model
