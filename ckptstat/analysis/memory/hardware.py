"""Accelerator memory for `ckptstat memory --gpu NAME` / `--gpu-mem SIZE` (docs/memory_planner.md).

Each capacity is the vendor's published figure (the page is the entry's `source`). Vendors write "GB"
for memory chips that come in power-of-two sizes: an "80GB" H100 carries 80 GiB of HBM, so the figure
is read as GiB (drivers report a little less). Where a card has been measured, the capacity is instead the total
CUDA reports on it (`torch.cuda.mem_get_info()`, bench/gpu_memory.py; bench/results/gpu_memory.md): an H200's
"141GB" is 139.80 GiB to CUDA (nvidia-smi: 143,771 MiB), not 141 GiB. What the CUDA context and the allocator keep
is the planner's named `runtime reserve` line, not a smaller capacity here.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ...errors import UsageError

GIB = 1 << 30


@dataclass(frozen=True)
class Gpu:
    name: str                 # canonical name (what --gpu prints back)
    gb: int                   # the vendor's figure, in its "GB" (binary: see the module docstring)
    source: str               # the vendor page the figure comes from
    aliases: tuple[str, ...] = ()
    note: str = ""
    cuda_total: int = 0       # bytes CUDA reports as the device's total on a real card (0: not measured)

    @property
    def bytes(self) -> int:
        return self.cuda_total or self.gb * GIB


_NV = "https://www.nvidia.com/en-us/"
_APPLE_NOTE = ("unified memory shared with the CPU; macOS lets Metal use about two thirds to three quarters of it "
               "by default (MTLDevice.recommendedMaxWorkingSetSize)")
GPUS: tuple[Gpu, ...] = (
    Gpu("T4", 16, _NV + "data-center/tesla-t4/"),
    Gpu("V100-16", 16, _NV + "data-center/v100/"),
    Gpu("V100-32", 32, _NV + "data-center/v100/"),
    Gpu("A10", 24, _NV + "data-center/products/a10-gpu/"),
    Gpu("A10G", 24, "https://aws.amazon.com/ec2/instance-types/g5/"),
    Gpu("L4", 24, _NV + "data-center/l4/"),
    Gpu("L40S", 48, _NV + "data-center/l40s/"),
    Gpu("A100-40", 40, _NV + "data-center/a100/"),
    Gpu("A100-80", 80, _NV + "data-center/a100/"),
    Gpu("H100-80", 80, _NV + "data-center/h100/", ("h100", "h100-sxm", "h100-pcie")),
    Gpu("H100-NVL", 94, _NV + "data-center/h100/"),
    Gpu("H200", 141, _NV + "data-center/h200/", ("h200-141",), cuda_total=150_109_880_320,
        note="measured: CUDA's total on an H200 (driver 580.159, bench/results/gpu_memory.md)"),
    Gpu("B200", 180, _NV + "data-center/dgx-b200/", note="DGX B200: 1,440 GB over 8 GPUs"),
    Gpu("RTX-3090", 24, _NV + "geforce/graphics-cards/30-series/rtx-3090-3090ti/"),
    Gpu("RTX-4090", 24, _NV + "geforce/graphics-cards/40-series/rtx-4090/"),
    Gpu("RTX-5090", 32, _NV + "geforce/graphics-cards/50-series/rtx-5090/"),
    Gpu("RTX-6000-Ada", 48, _NV + "products/workstations/rtx-6000/"),
    Gpu("MI250X", 128, "https://www.amd.com/en/products/accelerators/instinct/mi200/mi250x.html"),
    Gpu("MI300X", 192, "https://www.amd.com/en/products/accelerators/instinct/mi300/mi300x.html"),
    Gpu("MI325X", 256, "https://www.amd.com/en/products/accelerators/instinct/mi300/mi325x.html"),
    Gpu("M4-Pro-64", 64, "https://www.apple.com/mac-mini/specs/", note=_APPLE_NOTE),
    Gpu("M4-Max-128", 128, "https://www.apple.com/mac-studio/specs/", note=_APPLE_NOTE),
    Gpu("M3-Ultra-512", 512, "https://www.apple.com/mac-studio/specs/", note=_APPLE_NOTE),
)


def _key(name: str) -> str:
    """'NVIDIA H100 80GB' -> 'h10080': case, spaces, dashes, vendor words and a GB suffix dropped."""
    k = name.lower().replace("geforce", "").replace("nvidia", "").replace("instinct", "").replace("apple", "")
    k = re.sub(r"gb\b", "", k)
    return re.sub(r"[^a-z0-9]", "", k)


_BY_KEY = {_key(n): g for g in GPUS for n in (g.name, *g.aliases)}


def gpu(name: str) -> Gpu:
    """The entry for a name or an alias; a usage error otherwise, which names the entries the name starts
    (`A100`: A100-40 or A100-80) before any list of the whole table."""
    key = _key(name)
    found = _BY_KEY.get(key)
    if found is not None:
        return found
    family = list(dict.fromkeys(g.name for k, g in _BY_KEY.items() if key and k.startswith(key)))
    if len(family) > 1:
        raise UsageError(f"--gpu {name!r} is ambiguous: {', '.join(family[:-1])} or {family[-1]} "
                         "(give one of them, or --gpu-mem SIZE)")
    if family:
        raise UsageError(f"--gpu {name!r} is not in the table: did you mean {family[0]}? (or give --gpu-mem SIZE)")
    raise UsageError(f"--gpu {name!r} is not in the table; known: {', '.join(g.name for g in GPUS)} "
                     "(or give --gpu-mem SIZE)")


_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}


def parse_size(flag: str, text: str) -> int:
    """'80GiB' -> 85899345920; GB is 10^9 and GiB 2^30, as written. A usage error for anything else, a bare
    number included: a device's memory (or its reserve) in bytes is a slip for GiB or GB (`80`), and bytes
    must be said (`80B`)."""
    m = re.fullmatch(r"\s*(\d{1,15}(?:\.\d{1,9})?)\s*([kmgt]i?b|b)?\s*", text.lower())
    if not m:
        raise UsageError(f"{flag} takes a size such as 80GiB, 24GB or 512MiB (GB = 10^9 B, GiB = 2^30 B), got {text!r}")
    if m.group(2) is None:
        n = m.group(1)
        raise UsageError(f"{flag} {text.strip()} has no unit: write {n}GiB, {n}GB, {n}MiB or {n}B "
                         "(GiB = 2^30 B, GB = 10^9 B)")
    value = int(float(m.group(1)) * _UNITS[m.group(2)])
    if value <= 0:
        raise UsageError(f"{flag} must be positive, got {text!r}")
    return value
