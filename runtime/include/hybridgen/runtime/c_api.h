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
/* Bracket one device's partial inside a segment (device 0 = cpu, 1 = gpu). */
void hgrt_device_begin(int64_t segment_id, int32_t device);
void hgrt_device_end(int64_t segment_id, int32_t device);
/* 1 when compiled kernels may use AMX tiles: the CPU has AMX-BF16 and the OS granted this
   process the tile state (requested on the first call); 0 otherwise, or when the environment
   sets HYBRIDGEN_DISABLE_AMX to anything but 0. */
int32_t hgrt_amx_available(void);

#ifdef __cplusplus
}
#endif

#endif /* HYBRIDGEN_RUNTIME_C_API_H */
