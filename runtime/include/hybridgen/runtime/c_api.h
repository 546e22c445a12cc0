/* The runtime C ABI called by compiled code (docs/interfaces.md). Never throws; safe with no
   scheduler installed. */
#ifndef HYBRIDGEN_RUNTIME_C_API_H
#define HYBRIDGEN_RUNTIME_C_API_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Tokens of each sequence that go to the first device for the next run of |segment_id|;
   INT64_MAX when no scheduler is installed (everything on the first device). */
int64_t hgrt_split_point(int64_t segment_id);
/* Bracket one run of a compiled segment; the end feeds the scheduler. */
void hgrt_segment_begin(int64_t segment_id);
void hgrt_segment_end(int64_t segment_id);
/* Bracket one device's partial inside a segment (device 0 = cpu, 1 = gpu). With a CUDA device,
   the GPU bracket is also timed with CUDA events around the kernels launched inside it (on their
   stream), and segment_end reports that span as the GPU time; the CPU side keeps wall time. */
void hgrt_device_begin(int64_t segment_id, int32_t device);
void hgrt_device_end(int64_t segment_id, int32_t device);
/* 1 when a CUDA device and its context are usable (opened on the first call; without one, a
   one-line notice goes to stderr once and the compiled code runs every token on the CPU). */
int32_t hgrt_gpu_available(void);
/* The device address aliasing |host_ptr| inside a registered host KV pool array: for a layer's
   array base, block b of the HBM tier is at alias + b * block_bytes. NULL when |host_ptr| lies in
   no registered array (no GPU, or a pool without a device HBM tier). */
void *hgrt_gpu_alias(const void *host_ptr);
/* 1 when a GPU partial over tokens [split, lens[i]) of a batch may be launched: sizes positive,
   every length within the int32 [batch][max_blocks] table, every block of those tokens a valid
   id, and (with a pool installed) block_size the pool's and every such block in device memory.
   0 otherwise, with one line on stderr saying what is wrong; the caller then must not launch. */
int32_t hgrt_gpu_check_batch(const int32_t *block_table, const int32_t *lens, int64_t batch,
                             int64_t max_blocks, int64_t block_size, int64_t split);
/* 1 when compiled kernels may use AMX tiles: the CPU has AMX-BF16 and the OS granted this
   process the tile state (requested on the first call); 0 otherwise, or when the environment
   sets HYBRIDGEN_DISABLE_AMX to anything but 0. */
int32_t hgrt_amx_available(void);

/* Argument errors found by compiled kernels. A kernel checks every block id and length it would
   read (one compare per block, before its parallel loops, on the calling thread); on a violation
   it reports it here, reads nothing outside the pool and writes the empty partial
   (m = -inf, l = 0, o = 0). The record is per thread: the caller of a compiled function takes it
   after the call (JitModule::call and AotLibrary::call turn it into an ArgumentError). */
enum {
  HGRT_ARG_BLOCK_ID = 1, /* block_table[sequence][index] = value is not in [0, limit), the pool */
  HGRT_ARG_LENGTH = 2,   /* seq_lens[sequence] = value is negative or above limit (table tokens) */
  HGRT_ARG_BATCH = 3,    /* kernel argument #index has value rows (limit = the batch of q) */
  HGRT_ARG_SHAPE = 4     /* hg.merge: a partial's dimension #index is value, the output's limit */
};
typedef struct hgrt_argument_error {
  int32_t kind; /* HGRT_ARG_*; 0 when nothing was recorded */
  int64_t sequence, index, value, limit;
  int64_t count; /* violations recorded since the last take; the fields describe the first */
} hgrt_argument_error;
/* Records a violation on the calling thread (keeps the first one until taken). */
void hgrt_kernel_argument_error(int32_t kind, int64_t sequence, int64_t index, int64_t value,
                                int64_t limit);
/* 1 and the record (then cleared) when this thread recorded a violation since the last take;
   0 otherwise. |out| may be null to just clear. */
int32_t hgrt_take_kernel_argument_error(hgrt_argument_error *out);

#ifdef __cplusplus
}
#endif

#endif /* HYBRIDGEN_RUNTIME_C_API_H */
