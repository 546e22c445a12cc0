// Numerics of the device check: GPU-only (split 0), hybrid (an interior split) and CPU-only
// (split >= len) against a float64 reference, fresh random inputs, ragged batches.
#include "modes.h"

#include "hybridgen/runtime/cuda/gpu_runtime.h"

#include <climits>

namespace hybridgen::devcheck {

int runNumerics(const Options &o) {
  Csv csv(o.csv, "dtype,head_dim,group,split,path,max_abs_err,tolerance,pass,gpu_launches");
  std::mt19937_64 rng(20261201);
  const std::vector<int64_t> lens = {517, 64, 1000, 1}; // ragged, with a one-token sequence
  bool allPass = true;
  for (const std::string &dtype : {std::string("f32"), std::string("f16"), std::string("bf16")})
    for (int32_t headDim : {64, 128})
      for (int32_t group : {1, 4, 8}) {
        Shape s;
        s.dtype = dtype, s.headDim = headDim, s.kvHeads = 2, s.group = group;
        auto lib = loadLibrary(o, s);
        auto pool = makePool(s, 64ull << 20, 64ull << 20);
        const rt::KvLayout &l = pool->layout();
        std::vector<int64_t> seqs;
        for (int64_t len : lens) {
          int64_t seq = pool->createSequence();
          size_t n = size_t(len) * size_t(l.kvHeads) * size_t(l.headDim);
          std::vector<char> k = randomElts(l.dtype, n, rng), v = randomElts(l.dtype, n, rng);
          rt::throwIfError(pool->append(seq, len, k.data(), v.data()));
          seqs.push_back(seq);
        }
        const int64_t qHeads = s.qHeads();
        std::vector<float> q(seqs.size() * size_t(qHeads) * size_t(headDim));
        std::uniform_real_distribution<float> ud(-1.f, 1.f);
        for (float &x : q)
          x = ud(rng);
        // Reference once per case: it does not depend on the split.
        std::vector<std::vector<double>> ref(seqs.size() * size_t(qHeads));
        for (size_t b = 0; b < seqs.size(); ++b)
          for (int64_t h = 0; h < qHeads; ++h)
            referenceHead(*pool, seqs[b], lens[b], int32_t(h / group),
                          q.data() + (b * size_t(qHeads) + size_t(h)) * size_t(headDim), s.scale(),
                          ref[b * size_t(qHeads) + size_t(h)]);
        // Splits are multiples of the block size, as the scheduler makes them (a block belongs to
        // one device); 256 cuts the long sequences and leaves the short ones wholly on the CPU.
        const std::pair<int64_t, const char *> splits[] = {{0, "gpu-only"}, {256, "hybrid"},
                                                           {int64_t(1) << 40, "cpu-only"}};
        for (const auto &[split, path] : splits) {
          rt::SchedulerConfig sc;
          sc.policy = rt::SchedulerPolicy::kStatic;
          sc.staticSplit = split;
          sc.quantum = s.blockSize;
          auto ctx = std::make_shared<rt::SchedulerContext>(sc, pool.get());
          rt::installContext(ctx);
          placeFor(*pool, split);
          ctx->beginStep(*std::max_element(lens.begin(), lens.end()));
          std::vector<float> out(q.size(), NAN);
          BatchArgs ba;
          rt::throwIfError(makeArgs(*pool, seqs, qHeads, q, out, ba));
          uint64_t launches = rt::cuda::launchCount();
          lib->call("hg_attention", ba.args);
          launches = rt::cuda::launchCount() - launches;
          rt::uninstallContext();
          double err = 0;
          for (size_t i = 0; i < ref.size(); ++i)
            for (int32_t d = 0; d < headDim; ++d) {
              double e = std::fabs(double(out[i * size_t(headDim) + size_t(d)]) - ref[i][size_t(d)]);
              err = std::isnan(e) ? INFINITY : std::max(err, e);
            }
          // Outputs are f32 from f32 accumulation; K/V quantization is in the reference too.
          const double tol = 5e-5;
          bool pass = err <= tol;
          allPass = allPass && pass;
          csv.row(dtype + "," + std::to_string(headDim) + "," + std::to_string(group) + "," +
                  std::to_string(split == (int64_t(1) << 40) ? -1 : split) + "," + path + "," + fmt(err) + "," +
                  fmt(tol) + "," + (pass ? "1" : "0") + "," + std::to_string(launches));
        }
      }
  return allPass ? 0 : 1;
}

} // namespace hybridgen::devcheck
