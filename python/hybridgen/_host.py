"""What the CPU this process runs on has, from /proc/cpuinfo (Linux); empty elsewhere."""


def cpu_has_flag(flag: str) -> bool:
    """Whether /proc/cpuinfo lists |flag| (e.g. "avx512_bf16"); False where it cannot be read."""
    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith("flags") and flag in line.split() for line in f)
    except OSError:
        return False
