// Bench stand-in for the compiled CPU segment: plain C++ OpenMP decode attention over pool blocks.
#pragma once

#include "hybridgen/runtime/kv_pool.h"
#include "hybridgen/runtime/thread_plan.h"

#include <vector>

namespace hybridgen::bench {

/// Partials (docs/interfaces.md): o normalized [batch][qHeads][headDim], m and l [batch][qHeads].
struct Partials {
  std::vector<float> o, m, l;
};

/// Attention of q (f32 [batch][qHeads][headDim]) over the bf16 KV of |layer| for the tokens listed in
/// |plan| (one OpenMP thread per plan entry, pinned to the entry's node), merged exactly.
Partials cpuAttention(const rt::KvPool &pool, int32_t layer, int32_t batch, int32_t qHeads, const float *q,
                      const rt::ThreadPlan &plan);

/// float64 reference over tokens [0, split) of each sequence (for the bench's self-check).
Partials referenceAttention(const rt::KvPool &pool, int32_t layer, const std::vector<int64_t> &seqs,
                            int32_t qHeads, const float *q, int64_t split);

} // namespace hybridgen::bench
