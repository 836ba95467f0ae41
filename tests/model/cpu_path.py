"""Which CPU path a test took (its bf16 kernels differ between AMX,
avx512_bf16 and fp32 emulation): the same facts as model/util/cpu_info.h,
read from /proc/cpuinfo, for the Python tests to print beside results that
depend on them."""

ISA_FLAGS = ("fma", "avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8")


def _cpuinfo():
    model, flags = "unknown", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and model == "unknown":
                    model = value.strip()
                elif key.strip() == "flags" and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    return model, flags


def bf16_matmul_path(flags=None):
    flags = _cpuinfo()[1] if flags is None else flags
    if {"amx_bf16", "amx_tile"} <= flags:
        return "amx"
    for isa in ("avx512_bf16", "avx512f", "avx2"):
        if isa in flags:
            return isa
    return "scalar"


def int8_activation_levels(flags=None):
    """Int8Linear's activation levels (cpu_kernels.cc): 255 where the CPU has
    an int8 dot product (avx512_vnni or avx_vnni), else 127 (7 bits, so that
    u8 x s8 pair sums cannot saturate int16 in the AVX2 kernels)."""
    flags = _cpuinfo()[1] if flags is None else flags
    return 255 if {"avx512_vnni", "avx_vnni"} & flags else 127


def note():
    """'cpu MODEL, flags a,b,..., bf16 matmul path P' (cpu_info.h CpuPathNote)."""
    model, flags = _cpuinfo()
    present = ",".join(f for f in ISA_FLAGS if f in flags) or "none"
    return "cpu %s, flags %s, bf16 matmul path %s" % (model, present, bf16_matmul_path(flags))
