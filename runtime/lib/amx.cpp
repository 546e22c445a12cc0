// hgrt_amx_available: whether compiled kernels may use AMX tiles in this process.
//
// Linux hands out the AMX tile state (8 KiB per thread) only to processes that ask for it with
// arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA); a tile instruction without that
// permission is SIGILL. The permission is process-wide, so one request covers every OpenMP
// worker. HYBRIDGEN_DISABLE_AMX=1 makes kernels take their vector path (tests compare the two).
#include "hybridgen/runtime/c_api.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace {

constexpr long kArchReqXcompPerm = 0x1023; // asm/prctl.h
constexpr long kXfeatureXtiledata = 18;

bool cpuHasAmxBf16() {
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx))
    return false;
  const unsigned amxBf16 = 1u << 22, amxTile = 1u << 24;
  return (edx & amxBf16) && (edx & amxTile);
}

bool requestTiles() {
  return cpuHasAmxBf16() && syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

} // namespace

extern "C" int32_t hgrt_amx_available(void) {
  static const bool granted = requestTiles(); // thread-safe, once per process
  const char *off = std::getenv("HYBRIDGEN_DISABLE_AMX");
  if (off && *off && std::strcmp(off, "0") != 0)
    return 0;
  return granted ? 1 : 0;
}
