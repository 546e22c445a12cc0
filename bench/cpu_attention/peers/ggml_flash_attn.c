// Peer benchmark: ggml's CPU flash attention (ggml_flash_attn_ext) on the decode-attention shapes
// of hybridgen_cpu_attention_bench (Llama-3-8B: 32 q heads over 8 kv heads, head dim 128, one
// query token per sequence). Our own program over ggml's public API; it is built by
// scripts/peers.sh against a ggml fetched and built outside the repository, never by the
// project's CMake.
//
//   ggml_flash_attn [--contexts=16384,65536] [--batches=1,8] [--dtypes=f32,f16,bf16]
//                   [--threads=1,2] [--max-gib=4] [--min-seconds=0.4] [--cold-bytes=0]
//
// K and V are ggml's own layout, one contiguous [T, d] slab per kv head and sequence (no paging:
// ggml has none), so this is the peer's best case for reads. Prints one CSV row per case:
// context,batch,dtype,threads,kv_bytes,seconds,gbps (seconds: the best call after a warm-up,
// calls repeated for at least --min-seconds, or the warm-up call alone when it took longer;
// gbps: logical K+V bytes / seconds). With --cold-bytes=N the calls read enough copies of the
// case's q, K and V in turn that N bytes pass between two reads of one copy (as
// hybridgen_cpu_attention_bench does; bench_core.h, BenchOptions::coldBytes).
#include "ggml-cpu.h"
#include "ggml.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { Q_HEADS = 32, KV_HEADS = 8, HEAD_DIM = 128, MAX_LIST = 16, MAX_COPIES = 64 };

typedef struct {
  long values[MAX_LIST];
  int count;
} LongList;

typedef struct {
  const char *names[MAX_LIST];
  int count;
} NameList;

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// Splits "a,b,c" (modifies |text|). Returns 0 when there are more than MAX_LIST items.
static int split_names(char *text, NameList *out) {
  out->count = 0;
  for (char *tok = strtok(text, ","); tok; tok = strtok(NULL, ",")) {
    if (out->count == MAX_LIST)
      return 0;
    out->names[out->count++] = tok;
  }
  return out->count > 0;
}

static int split_longs(char *text, LongList *out) {
  NameList names;
  if (!split_names(text, &names))
    return 0;
  out->count = names.count;
  for (int i = 0; i < names.count; ++i) {
    char *end = NULL;
    out->values[i] = strtol(names.names[i], &end, 10);
    if (*end != '\0' || out->values[i] <= 0)
      return 0;
  }
  return 1;
}

static int parse_dtype(const char *name, enum ggml_type *type) {
  if (strcmp(name, "f32") == 0)
    *type = GGML_TYPE_F32;
  else if (strcmp(name, "f16") == 0)
    *type = GGML_TYPE_F16;
  else if (strcmp(name, "bf16") == 0)
    *type = GGML_TYPE_BF16;
  else
    return 0;
  return 1;
}

// Fills |t| (any of f32/f16/bf16) with small finite values: one random 64K-element tile copied
// over the tensor (values do not change the speed; gigabytes of random numbers would take
// longer than the measurement).
static void fill(struct ggml_tensor *t, unsigned seed, float amplitude) {
  enum { TILE = 65536 };
  static float tile[TILE];
  srand(seed);
  for (int i = 0; i < TILE; ++i)
    tile[i] = amplitude * ((float)rand() / (float)RAND_MAX - 0.5f);
  size_t elt = ggml_type_size(t->type);
  unsigned char converted[TILE * 4];
  if (t->type == GGML_TYPE_F32)
    memcpy(converted, tile, sizeof(tile));
  else if (t->type == GGML_TYPE_F16)
    ggml_fp32_to_fp16_row(tile, (ggml_fp16_t *)converted, TILE);
  else
    ggml_fp32_to_bf16_row(tile, (ggml_bf16_t *)converted, TILE);
  size_t total = (size_t)ggml_nbytes(t), step = (size_t)TILE * elt;
  unsigned char *dst = (unsigned char *)t->data;
  for (size_t off = 0; off < total; off += step)
    memcpy(dst + off, converted, total - off < step ? total - off : step);
}

// q, K and V of |batch| sequences of |context| tokens in ggml's flash_attn_ext layout (q [d,
// n_tokens, n_head, seqs], K/V [d, n_kv, n_head_kv, seqs]), filled from seeds |seed|.. and the
// attention over them, scaled by 1/sqrt(d).
typedef struct {
  struct ggml_tensor *q, *k, *v, *out;
} Attention;

static Attention build_attention(struct ggml_context *ctx, enum ggml_type type, long context,
                                 long batch, unsigned seed, float q_amplitude, float kv_amplitude) {
  Attention a;
  a.q = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, HEAD_DIM, 1, Q_HEADS, batch);
  a.k = ggml_new_tensor_4d(ctx, type, HEAD_DIM, context, KV_HEADS, batch);
  a.v = ggml_new_tensor_4d(ctx, type, HEAD_DIM, context, KV_HEADS, batch);
  fill(a.q, seed, q_amplitude);
  fill(a.k, seed + 1, kv_amplitude);
  fill(a.v, seed + 2, kv_amplitude);
  a.out = ggml_flash_attn_ext(ctx, a.q, a.k, a.v, NULL, (float)(1.0 / sqrt((double)HEAD_DIM)),
                              0.0f, 0.0f);
  return a;
}

// Before anything is timed: ggml's result on a small case (several sequences, a context that is
// no multiple of any tile) equals a double-precision attention over the same stored K/V, with
// values large enough that the softmax is far from uniform. Guards the shapes and GQA mapping
// this program hands ggml: a wrong layout would otherwise be timed as if it were attention.
static int check_against_reference(enum ggml_type type, const char *dtype_name) {
  enum { CONTEXT = 300, BATCH = 2, GROUP = Q_HEADS / KV_HEADS };
  struct ggml_init_params params = {.mem_size = 64 << 20, .mem_buffer = NULL, .no_alloc = false};
  struct ggml_context *ctx = ggml_init(params);
  Attention a = build_attention(ctx, type, CONTEXT, BATCH, 4, 4.0f, 2.0f);
  struct ggml_tensor *q = a.q, *k = a.k, *v = a.v, *out = a.out;
  double scale = 1.0 / sqrt((double)HEAD_DIM);
  struct ggml_cgraph *graph = ggml_new_graph(ctx);
  ggml_build_forward_expand(graph, out);
  int ok = ggml_graph_compute_with_ctx(ctx, graph, 1) == GGML_STATUS_SUCCESS;
  double worst = 0.0;
  static double scores[CONTEXT];
  for (int b = 0; ok && b < BATCH; ++b)
    for (int h = 0; h < Q_HEADS; ++h) {
      int kvh = h / GROUP;
      double top = -INFINITY, sum = 0.0;
      for (int t = 0; t < CONTEXT; ++t) {
        double dot = 0.0;
        for (int d = 0; d < HEAD_DIM; ++d)
          dot += (double)ggml_get_f32_nd(q, d, 0, h, b) * ggml_get_f32_nd(k, d, t, kvh, b);
        scores[t] = dot * scale;
        top = scores[t] > top ? scores[t] : top;
      }
      for (int t = 0; t < CONTEXT; ++t)
        sum += (scores[t] = exp(scores[t] - top));
      for (int d = 0; d < HEAD_DIM; ++d) {
        double ref = 0.0;
        for (int t = 0; t < CONTEXT; ++t)
          ref += scores[t] / sum * ggml_get_f32_nd(v, d, t, kvh, b);
        // ggml's result is [d, n_head, n_tokens, seqs].
        double err = fabs(ref - ggml_get_f32_nd(out, d, h, 0, b));
        worst = err > worst ? err : worst;
      }
    }
  // q is rounded to the K type for the dot products: 16-bit KV allows a 16-bit-sized error.
  double tolerance = type == GGML_TYPE_F32 ? 1e-4 : 2e-2;
  if (!ok || !(worst <= tolerance)) {
    fprintf(stderr, "ggml_flash_attn: %s result differs from the reference by %g (> %g)\n",
            dtype_name, worst, tolerance);
    ok = 0;
  }
  ggml_free(ctx);
  return ok;
}

// Times the |copies| graphs, in turn, at |threads|; prints the CSV row. Returns 0 on failure
// (printed).
static int time_graph(struct ggml_cgraph **graphs, int copies, const struct ggml_tensor *out,
                      int threads, double min_seconds, long context, long batch,
                      const char *dtype_name, size_t kv_bytes) {
  // One plan and work buffer per case (ggml_graph_compute_with_ctx would allocate a new work
  // buffer in the context on every call); the copies' graphs are alike, so one plan serves all.
  struct ggml_cplan plan = ggml_graph_plan(graphs[0], threads, NULL);
  void *work = plan.work_size ? malloc(plan.work_size) : NULL;
  if (plan.work_size && !work) {
    fprintf(stderr, "ggml_flash_attn: cannot allocate the %zu-byte work buffer\n", plan.work_size);
    return 0;
  }
  plan.work_data = work;

  // The warm-up call is timed too: when it alone takes longer than --min-seconds (KV of
  // gigabytes, far beyond the caches, so a second call would be no warmer) it is the measurement.
  int ok = 1, next = 0;
  for (int c = 1; c < copies && ok; ++c) // every copy but the first, untimed
    ok = ggml_graph_compute(graphs[c], &plan) == GGML_STATUS_SUCCESS;
  double start = now_seconds();
  ok = ok && ggml_graph_compute(graphs[0], &plan) == GGML_STATUS_SUCCESS;
  double warm_up = now_seconds() - start, best = INFINITY;
  if (warm_up >= min_seconds)
    best = warm_up;
  start = now_seconds();
  while (ok && warm_up < min_seconds &&
         (best == INFINITY || now_seconds() - start < min_seconds)) {
    next = (next + 1) % copies;
    double t0 = now_seconds();
    ok = ggml_graph_compute(graphs[next], &plan) == GGML_STATUS_SUCCESS;
    double t = now_seconds() - t0;
    if (t < best)
      best = t;
  }
  // A NaN would mean the kernel did not run on real data: say so rather than print a speed.
  float first = ((const float *)out->data)[0];
  if (!ok || !isfinite(first)) {
    fprintf(stderr, "ggml_flash_attn: compute failed for %s context %ld batch %ld\n", dtype_name,
            context, batch);
    ok = 0;
  } else {
    printf("%ld,%ld,%s,%d,%zu,%.6g,%.4g\n", context, batch, dtype_name, threads, kv_bytes, best,
           (double)kv_bytes / best / 1e9);
    fflush(stdout);
  }
  free(work);
  return ok;
}

// One (context, batch, dtype) at every thread count, on the same K/V; returns the number of
// thread counts that failed (each printed).
static int run_case(long context, long batch, const char *dtype_name, enum ggml_type type,
                    const LongList *thread_counts, double min_seconds, double cold_bytes,
                    double max_gib) {
  size_t elt = ggml_type_size(type);
  size_t kv_bytes = (size_t)2 * batch * context * KV_HEADS * HEAD_DIM * elt;
  size_t q_bytes = (size_t)batch * Q_HEADS * HEAD_DIM * 4;
  // Copies so that |cold_bytes| pass between two reads of one, within --max-gib in all.
  int copies = 1;
  if (cold_bytes > 0) {
    double wanted = ceil(cold_bytes / (double)kv_bytes); // copies x kv_bytes pass between reads
    double fit = floor(max_gib * (1 << 30) / (double)kv_bytes);
    copies = (int)fmax(1, fmin(fmin(wanted, fit), MAX_COPIES));
  }
  struct ggml_init_params params = {
      .mem_size = copies * (kv_bytes + 2 * q_bytes + 16 * ggml_tensor_overhead() +
                            ggml_graph_overhead()) +
                  (1 << 20),
      .mem_buffer = NULL,
      .no_alloc = false,
  };
  struct ggml_context *ctx = ggml_init(params);
  if (!ctx) {
    fprintf(stderr, "ggml_flash_attn: cannot allocate %.2f GiB for context %ld batch %ld\n",
            (double)params.mem_size / (1 << 30), context, batch);
    return thread_counts->count;
  }
  struct ggml_cgraph *graphs[MAX_COPIES];
  // The last copy's output, the one time_graph checks: its untimed warm-up computes every copy.
  struct ggml_tensor *out = NULL;
  for (int c = 0; c < copies; ++c) {
    out = build_attention(ctx, type, context, batch, 1, 0.1f, 0.1f).out;
    graphs[c] = ggml_new_graph(ctx);
    ggml_build_forward_expand(graphs[c], out);
  }
  if (copies > 1)
    fprintf(stderr, "ggml_flash_attn: %ld x %ld x %s: the calls read %d copies of the KV in turn\n",
            context, batch, dtype_name, copies);

  int failures = 0;
  for (int t = 0; t < thread_counts->count; ++t)
    failures += !time_graph(graphs, copies, out, (int)thread_counts->values[t], min_seconds,
                            context, batch, dtype_name, kv_bytes);
  ggml_free(ctx);
  return failures;
}

int main(int argc, char **argv) {
  char contexts_arg[256] = "16384,65536", batches_arg[256] = "1,8";
  char dtypes_arg[256] = "f32,f16,bf16", threads_arg[256] = "1,2";
  double max_gib = 4.0, min_seconds = 0.4, cold_bytes = 0;
  for (int i = 1; i < argc; ++i) {
    const char *a = argv[i];
    char *target = NULL;
    if (strncmp(a, "--contexts=", 11) == 0)
      target = contexts_arg, a += 11;
    else if (strncmp(a, "--batches=", 10) == 0)
      target = batches_arg, a += 10;
    else if (strncmp(a, "--dtypes=", 9) == 0)
      target = dtypes_arg, a += 9;
    else if (strncmp(a, "--threads=", 10) == 0)
      target = threads_arg, a += 10;
    else if (strncmp(a, "--max-gib=", 10) == 0)
      max_gib = atof(a + 10);
    else if (strncmp(a, "--min-seconds=", 14) == 0)
      min_seconds = atof(a + 14);
    else if (strncmp(a, "--cold-bytes=", 13) == 0)
      cold_bytes = atof(a + 13);
    else {
      fprintf(stderr, "ggml_flash_attn: unknown argument %s\n", argv[i]);
      return 2;
    }
    if (target) {
      if (strlen(a) >= 256) {
        fprintf(stderr, "ggml_flash_attn: argument too long: %s\n", argv[i]);
        return 2;
      }
      strcpy(target, a);
    }
  }
  LongList contexts, batches, threads;
  NameList dtypes;
  if (!split_longs(contexts_arg, &contexts) || !split_longs(batches_arg, &batches) ||
      !split_longs(threads_arg, &threads) || !split_names(dtypes_arg, &dtypes)) {
    fprintf(stderr, "ggml_flash_attn: lists are positive integers (dtypes: names), at most %d\n",
            MAX_LIST);
    return 2;
  }
  for (int d = 0; d < dtypes.count; ++d) {
    enum ggml_type type;
    if (!parse_dtype(dtypes.names[d], &type)) {
      fprintf(stderr, "ggml_flash_attn: unsupported KV dtype %s (f32, f16, bf16)\n",
              dtypes.names[d]);
      return 2;
    }
  }

  ggml_cpu_init();
  for (int d = 0; d < dtypes.count; ++d) {
    enum ggml_type type;
    parse_dtype(dtypes.names[d], &type);
    if (!check_against_reference(type, dtypes.names[d]))
      return 1;
  }
  printf("context,batch,dtype,threads,kv_bytes,seconds,gbps\n");
  int failures = 0;
  for (int d = 0; d < dtypes.count; ++d) {
    enum ggml_type type;
    parse_dtype(dtypes.names[d], &type);
    for (int c = 0; c < contexts.count; ++c)
      for (int b = 0; b < batches.count; ++b) {
        double gib = 2.0 * batches.values[b] * contexts.values[c] * KV_HEADS * HEAD_DIM *
                     (double)ggml_type_size(type) / (1 << 30);
        if (gib > max_gib) {
          fprintf(stderr, "ggml_flash_attn: skipped %s context %ld batch %ld (%.1f GiB > %.1f)\n",
                  dtypes.names[d], contexts.values[c], batches.values[b], gib, max_gib);
          continue;
        }
        failures += run_case(contexts.values[c], batches.values[b], dtypes.names[d], type,
                             &threads, min_seconds, cold_bytes, max_gib);
      }
  }
  return failures ? 1 : 0;
}
