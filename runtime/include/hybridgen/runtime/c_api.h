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

#ifdef __cplusplus
}
#endif

#endif /* HYBRIDGEN_RUNTIME_C_API_H */
