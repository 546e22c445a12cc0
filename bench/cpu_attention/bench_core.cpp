// The measuring half of the CPU attention benchmark (bench_core.h): the read roof, the pools, the
// timing rounds. MLIR-free, so the AOT-only bench can run it where LLVM is not installed.
#include "bench_core.h"

#include <omp.h>
#include <unistd.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

namespace hybridgen::bench {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string kernelPath(const std::string &dir, const std::string &dtype, bool amx) {
  return dir + "/attention_" + dtype + (amx ? "" : "_noamx") + ".so";
}

namespace {

std::vector<std::string> split(const std::string &s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    out.push_back(item);
  return out;
}

template <typename T> std::vector<T> splitNumbers(const std::string &s) {
  std::vector<T> out;
  for (const std::string &item : split(s))
    out.push_back(static_cast<T>(std::stoll(item)));
  return out;
}

/// Allocated like the runtime's KV pool (runtime/lib/kv_pool.cpp): an anonymous mapping advised
/// MADV_HUGEPAGE (THP is `madvise` on this machine), so the kernel sees the TLB behaviour it gets
/// in production. The roof buffer is allocated the same way, so the comparison stays fair.
/// First-touched by the threads that will read it (one NUMA node here anyway).
struct Buffer {
  explicit Buffer(size_t bytes) : size(bytes), mapped((bytes + 4095) / 4096 * 4096) {
    void *p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      std::fprintf(stderr, "out of memory mapping %zu bytes\n", bytes);
      std::exit(1);
    }
    (void)madvise(p, mapped, MADV_HUGEPAGE); // best effort, as the pool does
    ptr = static_cast<char *>(p);
  }
  ~Buffer() { munmap(ptr, mapped); }
  Buffer(const Buffer &) = delete;
  Buffer &operator=(const Buffer &) = delete;
  char *ptr;
  size_t size, mapped;
};

/// How far ahead the software-prefetching roof pass asks for lines: 2-8 KiB measured alike here
/// (within noise of the plain sum, at times a few % above it).
constexpr int64_t kRoofPrefetchBytes = 4096;

/// One pass of the read roof: a vectorized, OpenMP-parallel f32 sum over |buf| (far larger than
/// L3), in bytes per second. With |twoStreams| each thread reads both halves at once, as attention
/// reads K and V; that is ~10% faster here. With |prefetchBytes| > 0 a single stream also asks
/// for each line that far ahead in software, as the kernels do. The roof takes the best of the
/// three, so a kernel's ratio is against the best plain read this machine showed in the round.
double readRoofPass(const Buffer &buf, bool twoStreams, int64_t prefetchBytes = 0) {
  const float *x = reinterpret_cast<const float *>(buf.ptr);
  int64_t n = static_cast<int64_t>(buf.size / sizeof(float));
  static volatile float sink = 0;
  double t0 = now();
  float total = 0;
  if (prefetchBytes > 0) {
    constexpr int64_t kLine = 16; // floats per 64-byte line
    int64_t ahead = prefetchBytes / 4, lines = n / kLine;
#pragma omp parallel reduction(+ : total)
    {
      int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
      int64_t l0 = lines * t / nt, l1 = lines * (t + 1) / nt;
      float acc[kLine] = {};
      for (int64_t line = l0; line < l1; ++line) {
        const float *p = x + line * kLine;
        if (line * kLine + ahead < n)
          __builtin_prefetch(p + ahead, 0, 3);
#pragma omp simd
        for (int64_t j = 0; j < kLine; ++j)
          acc[j] += p[j];
      }
      for (float a : acc)
        total += a;
    }
  } else if (twoStreams) {
    const float *y = x + n / 2;
#pragma omp parallel for simd reduction(+ : total) schedule(static)
    for (int64_t i = 0; i < n / 2; ++i)
      total += x[i] + y[i];
  } else {
#pragma omp parallel for simd reduction(+ : total) schedule(static)
    for (int64_t i = 0; i < n; ++i)
      total += x[i];
  }
  double dt = now() - t0;
  sink = sink + total;
  return static_cast<double>(buf.size) / dt;
}

/// Element |i| of the fill pattern of |seed|: a multiple of 1/256 in [-0.5, 0.5).
float patternValue(int64_t i, uint32_t seed) {
  return static_cast<float>(static_cast<int32_t>((i * 2654435761u + seed) % 255u) - 127) / 256.0f;
}

/// Fills a buffer with small finite values of |dtype| in parallel (values do not change speed,
/// but denormals and NaNs would).
void fill(Buffer &buf, memref_call::ElemType dtype, uint32_t seed) {
  if (dtype == memref_call::ElemType::f32) {
    float *p = reinterpret_cast<float *>(buf.ptr);
    int64_t n = static_cast<int64_t>(buf.size / 4);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i)
      p[i] = patternValue(i, seed);
  } else {
    uint16_t *p = reinterpret_cast<uint16_t *>(buf.ptr);
    int64_t n = static_cast<int64_t>(buf.size / 2);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      float f = patternValue(i, seed);
      uint32_t u;
      std::memcpy(&u, &f, 4);
      p[i] = static_cast<uint16_t>(u >> 16); // exact: the values have few mantissa bits
    }
  }
}

/// Parses one common flag; false if |a| is none of them.
bool parseCommonFlag(const std::string &a, BenchOptions &opts) {
  auto value = [&](const char *flag) -> const char * {
    size_t n = std::strlen(flag);
    return a.compare(0, n, flag) == 0 ? a.c_str() + n : nullptr;
  };
  if (const char *v = value("--contexts="))
    opts.contexts = splitNumbers<int64_t>(v);
  else if (const char *v = value("--batches="))
    opts.batches = splitNumbers<int64_t>(v);
  else if (const char *v = value("--dtypes="))
    opts.dtypes = split(v);
  else if (const char *v = value("--threads="))
    opts.threads = splitNumbers<int>(v);
  else if (const char *v = value("--max-gib="))
    opts.maxGiB = std::atof(v);
  else if (const char *v = value("--min-seconds="))
    opts.minSeconds = std::atof(v);
  else if (const char *v = value("--q-heads="))
    opts.qHeads = std::stoll(v);
  else if (const char *v = value("--kv-heads="))
    opts.kvHeads = std::stoll(v);
  else if (const char *v = value("--head-dim="))
    opts.headDim = std::stoll(v);
  else if (const char *v = value("--block="))
    opts.block = std::stoll(v);
  else if (const char *v = value("--reuse-blocks="))
    opts.reuseBlocks = std::stoll(v);
  else if (const char *v = value("--run-blocks="))
    opts.runBlocks = std::max<int64_t>(1, std::stoll(v));
  else if (const char *v = value("--q-scale="))
    opts.qScale = std::max(0.0, std::atof(v));
  else if (const char *v = value("--cold-bytes="))
    opts.coldBytes = std::max<int64_t>(-1, std::stoll(v));
  else
    return false;
  return true;
}

} // namespace

bool parseFlags(int argc, char **argv, BenchOptions &opts,
                const std::function<bool(const std::string &arg)> &own) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (!parseCommonFlag(a, opts) && !own(a)) {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return false;
    }
  }
  return true;
}

void runCases(const BenchOptions &opts,
              const std::function<AttentionCall(const std::string &dtype)> &kernelFor) {
  using memref_call::Arg;
  using memref_call::ElemType;
  Buffer roofBuf(size_t(1) << 30); // 1 GiB: 32x the L3
  fill(roofBuf, ElemType::f32, 7);
  std::printf("context,batch,dtype,threads,kv_bytes,seconds,gbps,roof_gbps,ratio\n");
  for (const std::string &dtypeName : opts.dtypes) {
    ElemType dtype;
    if (!memref_call::parseElemType(dtypeName, dtype) || dtype == ElemType::i32 ||
        dtype == ElemType::i64) {
      std::fprintf(stderr, "unsupported KV dtype %s\n", dtypeName.c_str());
      std::exit(2);
    }
    AttentionCall call = kernelFor(dtypeName);
    size_t elt = dtype == ElemType::f32 ? 4 : 2;
    int64_t block = opts.block;
    size_t tokenBytes = opts.kvHeads * opts.headDim * elt; // one of K or V
    for (int64_t context : opts.contexts) {
      for (int64_t requested : opts.batches) {
        // Scale the batch down where K+V would not fit the memory budget.
        int64_t batch = requested;
        while (batch > 1 && double(batch * context * tokenBytes * 2) > opts.maxGiB * (1 << 30))
          batch /= 2;
        int64_t blocksPerSeq = (context + block - 1) / block;
        double kvBytes = double(batch) * context * tokenBytes * 2;
        // The calls read |copies| copies of the KV in turn (BenchOptions::coldBytes); each copy
        // is a pool segment of |numBlocks| blocks with its own block table.
        int64_t coldBytes = opts.coldBytes < 0 ? defaultColdBytes() : opts.coldBytes;
        int64_t copies =
            opts.reuseBlocks > 0 ? 1 : coldCopies(kvBytes, coldBytes, opts.maxGiB * (1 << 30));
        int64_t numBlocks = batch * blocksPerSeq;
        size_t poolBytes = size_t(copies * numBlocks) * block * tokenBytes;
        Buffer k(poolBytes), v(poolBytes);
        fill(k, dtype, 1);
        fill(v, dtype, 2);
        std::vector<int32_t> table(copies * batch * blocksPerSeq), lens(batch, int32_t(context));
        // Interleave the sequences' blocks as the runtime's pool does for a batch decoded in
        // lockstep: a run of --run-blocks consecutive blocks (default: FreeBlocks's run) of each
        // sequence in turn.
        int64_t reuse = opts.reuseBlocks, run = std::min(opts.runBlocks, blocksPerSeq);
        for (int64_t b = 0; b < batch; ++b)
          for (int64_t i = 0; i < blocksPerSeq; ++i) {
            // Block i lies in the run starting at block |start| of every sequence; the batch's
            // runs there (the last ones maybe shorter) follow one another.
            int64_t start = i / run * run, length = std::min(run, blocksPerSeq - start);
            int64_t id = start * batch + b * length + i % run;
            for (int64_t c = 0; c < copies; ++c)
              table[(c * batch + b) * blocksPerSeq + i] =
                  int32_t(reuse > 0 ? id % reuse : c * numBlocks + id);
          }
        std::vector<float> q(batch * opts.qHeads * opts.headDim, 0.01f), out(q.size());
        if (opts.qScale > 0)
          for (size_t i = 0; i < q.size(); ++i)
            q[i] = float(opts.qScale) * patternValue(int64_t(i), 3);
        std::vector<int64_t> poolShape = {copies * numBlocks, opts.kvHeads, block, opts.headDim};
        std::vector<int64_t> qShape = {batch, opts.qHeads, opts.headDim};
        std::vector<Arg> args = {{q.data(), ElemType::f32, qShape, {}},
                                 {k.ptr, dtype, poolShape, {}},
                                 {v.ptr, dtype, poolShape, {}},
                                 {table.data(), ElemType::i32, {batch, blocksPerSeq}, {}},
                                 {lens.data(), ElemType::i32, {batch}, {}},
                                 {out.data(), ElemType::f32, qShape, {}}};
        if (copies > 1)
          std::fprintf(stderr, "bench: %lld x %lld x %s: the calls read %lld copies of the KV in turn\n",
                       (long long)context, (long long)batch, dtypeName.c_str(), (long long)copies);
        int64_t nextCopy = 0;
        auto callNext = [&] { // the copies differ only in their block table
          args[3].data = table.data() + nextCopy * batch * blocksPerSeq;
          call(args);
          nextCopy = (nextCopy + 1) % copies;
        };
        for (int t : opts.threads) {
          omp_set_num_threads(t);
          readRoofPass(roofBuf, false); // warms the roof buffer's TLB entries
          for (int64_t c = 0; c < copies; ++c)
            callNext(); // and the kernel's, of every copy
          // The machine is shared: alternate roof passes and kernel calls over several rounds
          // and compare best with best, so both sides see the least-contended moments.
          double roof = 0, best = 1e30;
          constexpr int kRounds = 5;
          for (int round = 0; round < kRounds; ++round) {
            roof = std::max({roof, readRoofPass(roofBuf, false), readRoofPass(roofBuf, true),
                             readRoofPass(roofBuf, false, kRoofPrefetchBytes)});
            double start = now();
            int calls = 0;
            while (calls < 2 || (now() - start < opts.minSeconds / kRounds && calls < 20)) {
              double c0 = now();
              callNext();
              best = std::min(best, now() - c0);
              ++calls;
            }
          }
          double gbps = kvBytes / best / 1e9;
          std::printf("%lld,%lld,%s,%d,%.0f,%.6f,%.2f,%.2f,%.3f\n", (long long)context,
                      (long long)batch, dtypeName.c_str(), t, kvBytes, best, gbps, roof / 1e9,
                      gbps / (roof / 1e9));
          std::fflush(stdout);
        }
      }
    }
  }
}

int64_t defaultColdBytes() {
  long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  return l3 > 0 ? 2 * int64_t(l3) : int64_t(64) << 20;
}

int64_t coldCopies(double kvBytes, int64_t coldBytes, double maxBytes) {
  if (coldBytes <= 0 || kvBytes <= 0)
    return 1;
  // Between two reads of one byte of a copy, every copy is read once: copies x kvBytes.
  int64_t wanted = int64_t(std::ceil(double(coldBytes) / kvBytes));
  int64_t fit = std::max<int64_t>(1, int64_t(maxBytes / kvBytes));
  return std::min(wanted, fit);
}

double measureReadRoof(size_t bytes, int rounds) {
  Buffer buf(bytes);
  fill(buf, memref_call::ElemType::f32, 7);
  readRoofPass(buf, false); // warms the TLB entries
  double roof = 0;
  for (int round = 0; round < rounds; ++round)
    roof = std::max({roof, readRoofPass(buf, false), readRoofPass(buf, true),
                     readRoofPass(buf, false, kRoofPrefetchBytes)});
  return roof;
}

} // namespace hybridgen::bench
