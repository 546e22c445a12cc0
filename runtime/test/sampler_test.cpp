// Sampler: greedy picks, draws whose frequencies follow the filtered softmax (chi-square against
// the probabilities computed here in double), the filters' kept sets, the repetition penalty,
// seeded reproducibility, and errors for bad options, logits and ids.
#include "hybridgen/runtime/model/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <utility>
#include <vector>

namespace hybridgen::rt::model {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

Sampler make(const SamplingOptions &o, int64_t batch, int64_t vocab) {
  Result<Sampler> s = Sampler::create(o, batch, vocab);
  EXPECT_TRUE(s.isOk()) << s.status().message();
  return std::move(s).valueOrThrow();
}

/// How often each token comes out of |draws| draws (batch 1) from the same |logits|.
std::vector<int64_t> histogram(Sampler &s, const std::vector<float> &logits, int64_t draws) {
  std::vector<int64_t> counts(logits.size());
  for (int64_t i = 0; i < draws; ++i) {
    Result<std::vector<int32_t>> t = s.next(logits.data());
    EXPECT_TRUE(t.isOk()) << t.status().message();
    counts[size_t((*t)[0])]++;
  }
  return counts;
}

/// softmax(logits / T) over the tokens in |keep|, zero elsewhere.
std::vector<double> expected(const std::vector<float> &logits, double T,
                             const std::vector<int> &keep) {
  std::vector<double> p(logits.size());
  double total = 0;
  for (int i : keep)
    total += p[size_t(i)] = std::exp(logits[size_t(i)] / T);
  for (double &x : p)
    x /= total;
  return p;
}

/// Pearson's chi-square of |counts| against |p|; a token with p = 0 that was drawn fails outright.
double chiSquare(const std::vector<int64_t> &counts, const std::vector<double> &p) {
  double n = 0, chi = 0;
  for (int64_t c : counts)
    n += double(c);
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == 0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " should never be drawn";
      continue;
    }
    double e = n * p[i];
    chi += (double(counts[i]) - e) * (double(counts[i]) - e) / e;
  }
  return chi;
}

// Chi-square bounds well past the 1e-6 tail for up to 8 degrees of freedom (the 0.999999 quantile
// of chi2(8) is ~45): the seeds are fixed, so these cannot flake, and a wrong temperature or a
// wrong kept set puts the statistic in the thousands.
constexpr double kChiBound = 45;
constexpr int64_t kDraws = 20000;

TEST(Sampler, GreedyIsTheFirstLargestLogit) {
  Sampler s = make({}, 2, 4);
  std::vector<float> logits = {0.5f, 2.0f, 2.0f, -1.0f, /* row 1 */ kNegInf, -3.0f, -2.0f, -2.5f};
  Result<std::vector<int32_t>> t = s.next(logits.data());
  ASSERT_TRUE(t.isOk()) << t.status().message();
  EXPECT_EQ(*t, (std::vector<int32_t>{1, 2}));
}

TEST(Sampler, DrawsFollowTheSoftmaxAtTheTemperature) {
  std::vector<float> logits = {2.0f, 1.5f, 1.0f, 0.5f, 0.0f, -0.5f, -1.0f, kNegInf};
  SamplingOptions o;
  o.temperature = 0.7;
  o.seed = 7;
  Sampler s = make(o, 1, 8);
  std::vector<int64_t> counts = histogram(s, logits, kDraws);
  EXPECT_LT(chiSquare(counts, expected(logits, 0.7, {0, 1, 2, 3, 4, 5, 6})), kChiBound);
  // The same draws scored against temperature 1 are far off: the test can tell.
  EXPECT_GT(chiSquare(counts, expected(logits, 1.0, {0, 1, 2, 3, 4, 5, 6})), 10 * kChiBound);
}

TEST(Sampler, TopKKeepsTheKLargest) {
  std::vector<float> logits = {0.1f, 1.0f, -0.3f, 0.9f, 0.8f, -2.0f};
  SamplingOptions o;
  o.temperature = 1;
  o.topK = 3;
  Sampler s = make(o, 1, 6);
  std::vector<int64_t> counts = histogram(s, logits, kDraws);
  EXPECT_LT(chiSquare(counts, expected(logits, 1.0, {1, 3, 4})), kChiBound);
}

TEST(Sampler, TopPKeepsTheSmallestNucleus) {
  // Probabilities 1/2, 1/4, 1/8, ... (ids shuffled): 1/2 < 0.7 <= 3/4, so two tokens stay.
  std::vector<float> logits(6);
  const int rank[6] = {3, 0, 5, 1, 4, 2}; // token i is the rank[i]-th most likely
  for (int i = 0; i < 6; ++i)
    logits[size_t(i)] = float(-rank[i] * std::log(2.0));
  SamplingOptions o;
  o.temperature = 1;
  o.topP = 0.7;
  Sampler s = make(o, 1, 6);
  std::vector<int64_t> counts = histogram(s, logits, kDraws);
  EXPECT_LT(chiSquare(counts, expected(logits, 1.0, {1, 3})), kChiBound);
}

TEST(Sampler, TopPOfAFlatRowKeepsTheLowerIdsOfTheTies) {
  // 1000 equal logits: a nucleus of 0.5 is 500 tokens (the selection recurses many times); ties
  // go to the lower ids, so only ids 0..499 may come out.
  std::vector<float> logits(1000, 0.25f);
  SamplingOptions o;
  o.temperature = 1;
  o.topP = 0.5;
  Sampler s = make(o, 1, 1000);
  std::vector<int64_t> counts = histogram(s, logits, 5000);
  int64_t low = 0, high = 0;
  for (size_t i = 0; i < 1000; ++i)
    (i < 500 ? low : high) += counts[i];
  EXPECT_EQ(high, 0);
  EXPECT_EQ(low, 5000);
  EXPECT_GT(counts[499], 0);
  EXPECT_GT(counts[300], 0);
}

/// The kept tokens and probabilities written plainly: sort the whole row, cut, normalize.
std::vector<std::pair<int32_t, double>> bruteForce(const std::vector<float> &logits,
                                                   const SamplingOptions &o) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < logits.size(); ++i)
    if (logits[i] != kNegInf)
      ids.push_back(int32_t(i));
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b);
  });
  if (o.topK > 0 && size_t(o.topK) < ids.size())
    ids.resize(size_t(o.topK));
  const double top = logits[size_t(ids[0])];
  std::vector<double> w;
  for (int32_t i : ids)
    w.push_back(std::exp((logits[size_t(i)] - top) / o.temperature));
  double total = 0;
  for (double x : w)
    total += x;
  size_t keep = ids.size();
  double cum = 0;
  for (size_t k = 0; k < ids.size() && o.topP < 1; ++k)
    if ((cum += w[k]) >= o.topP * total) {
      keep = k + 1;
      break;
    }
  std::vector<std::pair<int32_t, double>> out;
  double kept = 0;
  for (size_t k = 0; k < keep; ++k)
    if (w[k] >= o.minP) {
      out.emplace_back(ids[k], w[k]);
      kept += w[k];
    }
  for (auto &[id, p] : out)
    p /= kept;
  std::sort(out.begin(), out.end());
  return out;
}

TEST(Sampler, KeptTokensAndProbabilitiesMatchASortOfTheWholeRow) {
  // Rows of 300 logits on a coarse grid (many ties, some -inf), against every mix of filters.
  std::mt19937 gen(5);
  std::uniform_int_distribution<int> grid(-8, 8), holes(0, 9);
  int checked = 0;
  for (int trial = 0; trial < 60; ++trial) {
    std::vector<float> logits(300);
    for (float &x : logits)
      x = holes(gen) == 0 ? kNegInf : 0.5f * float(grid(gen));
    for (double t : {0.6, 1.7})
      for (int64_t k : {0, 1, 7, 120, 400})
        for (double p : {1.0, 0.3137, 0.8111})
          for (double mp : {0.0, 0.0123}) {
            SamplingOptions o;
            o.temperature = t;
            o.topK = k;
            o.topP = p;
            o.minP = mp;
            Sampler s = make(o, 1, 300);
            Result<std::vector<std::pair<int32_t, double>>> got = s.distribution(0, logits.data());
            ASSERT_TRUE(got.isOk()) << got.status().message();
            std::vector<std::pair<int32_t, double>> want = bruteForce(logits, o);
            ASSERT_EQ(got->size(), want.size()) << "trial " << trial << " t " << t << " k " << k
                                                << " p " << p << " min_p " << mp;
            for (size_t i = 0; i < want.size(); ++i) {
              ASSERT_EQ((*got)[i].first, want[i].first);
              ASSERT_NEAR((*got)[i].second, want[i].second, 1e-12);
            }
            ++checked;
          }
  }
  EXPECT_EQ(checked, 60 * 60);
}

TEST(Sampler, MinPDropsTokensBelowTheFractionOfTheBest) {
  // Weights relative to the best: 1, e^-1 (0.37), e^-2 (0.14), e^-3 (0.05); min_p 0.1 keeps three.
  std::vector<float> logits = {-3.0f, 0.0f, -1.0f, -2.0f};
  SamplingOptions o;
  o.temperature = 1;
  o.minP = 0.1;
  Sampler s = make(o, 1, 4);
  std::vector<int64_t> counts = histogram(s, logits, kDraws);
  EXPECT_LT(chiSquare(counts, expected(logits, 1.0, {1, 2, 3})), kChiBound);
}

TEST(Sampler, RepetitionPenaltyDividesPositiveAndMultipliesNegativeLogits) {
  SamplingOptions o;
  o.repetitionPenalty = 1.5;
  Sampler s = make(o, 2, 3);
  const int32_t seen0[] = {0}, seen1[] = {0};
  ASSERT_TRUE(s.observe(0, seen0, 1).isOk());
  ASSERT_TRUE(s.observe(1, seen1, 1).isOk());
  // Row 0: 3.0 / 1.5 = 2.0 < 2.9; row 1: -1.0 * 1.5 = -1.5 < -1.2.
  std::vector<float> logits = {3.0f, 2.9f, -1.0f, /* row 1 */ -1.0f, -1.2f, -9.0f};
  Result<std::vector<int32_t>> t = s.next(logits.data());
  ASSERT_TRUE(t.isOk()) << t.status().message();
  EXPECT_EQ(*t, (std::vector<int32_t>{1, 1}));
}

TEST(Sampler, PickedTokensJoinTheHistoryOnce) {
  SamplingOptions o;
  o.repetitionPenalty = 1.2;
  Sampler s = make(o, 1, 3);
  std::vector<float> logits = {3.0f, 2.9f, 2.8f};
  std::vector<int32_t> got;
  for (int i = 0; i < 4; ++i)
    got.push_back((*s.next(logits.data()))[0]);
  // 0, then 1 (0 is now 2.5), then 2 (1 is 2.42), then 0 again: a seen token is penalized once.
  EXPECT_EQ(got, (std::vector<int32_t>{0, 1, 2, 0}));
}

TEST(Sampler, SeedsRepeatAndSequencesDrawTheirOwnStreams) {
  std::vector<float> row(100, 0.0f), logits;
  logits.insert(logits.end(), row.begin(), row.end());
  logits.insert(logits.end(), row.begin(), row.end());
  SamplingOptions o;
  o.temperature = 1;
  o.seed = 42;
  auto run = [&](uint64_t seed) {
    o.seed = seed;
    Sampler s = make(o, 2, 100);
    std::vector<int32_t> seq0, seq1;
    for (int i = 0; i < 64; ++i) {
      std::vector<int32_t> t = *s.next(logits.data());
      seq0.push_back(t[0]);
      seq1.push_back(t[1]);
    }
    return std::make_pair(seq0, seq1);
  };
  auto a = run(42), b = run(42), c = run(43);
  EXPECT_EQ(a, b);
  EXPECT_NE(a.first, a.second);
  EXPECT_NE(a.first, c.first);
}

TEST(Sampler, BadOptionsAreNamed) {
  auto error = [](SamplingOptions o) {
    Result<Sampler> s = Sampler::create(o, 1, 4);
    EXPECT_FALSE(s.isOk());
    return s.status().message();
  };
  SamplingOptions o;
  o.temperature = -1;
  EXPECT_NE(error(o).find("temperature"), std::string::npos);
  o = {};
  o.temperature = std::nan("");
  EXPECT_NE(error(o).find("temperature"), std::string::npos);
  o = {};
  o.topK = -2;
  EXPECT_NE(error(o).find("top_k"), std::string::npos);
  for (double p : {0.0, 1.5, std::nan("")}) {
    o = {};
    o.topP = p;
    EXPECT_NE(error(o).find("top_p"), std::string::npos) << p;
  }
  o = {};
  o.minP = 2;
  EXPECT_NE(error(o).find("min_p"), std::string::npos);
  for (double p : {0.0, -1.0, std::numeric_limits<double>::infinity()}) {
    o = {};
    o.repetitionPenalty = p;
    EXPECT_NE(error(o).find("repetition_penalty"), std::string::npos) << p;
  }
  EXPECT_FALSE(Sampler::create({}, 0, 4).isOk());
  EXPECT_FALSE(Sampler::create({}, 1, 0).isOk());
}

TEST(Sampler, BadLogitsAndIdsAreErrors) {
  for (double temperature : {0.0, 1.0}) {
    SamplingOptions o;
    o.temperature = temperature;
    Sampler s = make(o, 2, 3);
    std::vector<float> logits = {0.0f, 1.0f, 2.0f, 0.0f, std::nanf(""), 1.0f};
    Result<std::vector<int32_t>> t = s.next(logits.data());
    ASSERT_FALSE(t.isOk());
    EXPECT_NE(t.status().message().find("sequence 1"), std::string::npos) << t.status().message();
    EXPECT_NE(t.status().message().find("NaN"), std::string::npos);
    logits[4] = std::numeric_limits<float>::infinity();
    EXPECT_FALSE(s.next(logits.data()).isOk());
    logits = {kNegInf, kNegInf, kNegInf, 0.0f, 0.0f, 0.0f};
    EXPECT_FALSE(s.next(logits.data()).isOk());
  }
  Sampler s = make({}, 1, 3);
  const int32_t outside[] = {1, 3};
  EXPECT_FALSE(s.observe(0, outside, 2).isOk());
  EXPECT_FALSE(s.observe(1, outside, 1).isOk());
  EXPECT_FALSE(s.next(nullptr).isOk());
}

} // namespace
} // namespace hybridgen::rt::model
