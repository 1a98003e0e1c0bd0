"""`ckptstat diff MODEL_DIR model.gguf` of an MLA model (GGUF architecture deepseek2: DeepSeek-V2 / V3 / R1, Kimi K2,
GLM-4.7-Flash): llama.cpp's converter (DeepseekV2Model.modify_tensors, conversion/deepseek.py, since its MLA rework)
splits each `kv_b_proj` [heads x (nope + v), rank] per head into `attn_k_b` [heads, rank, nope] (the k_nope rows,
transposed) and `attn_v_b` [heads, v, rank]. Read joined back, a head at a time, as mlx_lm's same split is
(conversion_mlx.Joined), under llama.cpp's older name `attn_kv_b`, which the family's table maps to `kv_b_proj`."""
from __future__ import annotations

import re
from dataclasses import replace

from ..core import Checkpoint, TensorInfo
from ..core.tensor import read_flat_file
from .conversion_mlx import Joined, Stored, _dispatch

LABEL = "llama.cpp's per-head split of kv_b_proj (attn_k_b transposed, attn_v_b) joined"
# the joined pair's name, `blk.N.attn_k_b.weight + blk.N.attn_v_b.weight`, as llama.cpp's older files name the whole
RULE = (re.compile(r"^(blk\.\d+)\.attn_k_b\.weight \+ \1\.attn_v_b\.weight$"), r"\1.attn_kv_b.weight")
_FLOATS = ("F32", "F16", "BF16")   # halves of a block type stay apart (no rounding bound for a joined Q-type yet)


def joined(ckpt: Checkpoint) -> Checkpoint:
    """The GGUF checkpoint with each `blk.N.attn_k_b.weight` / `attn_v_b.weight` pair whose shapes rebuild a kv_b_proj
    (and of one float dtype) read as one tensor [heads x (nope + v), rank] named `blk.N.attn_k_b.weight +
    blk.N.attn_v_b.weight` (RULE names it `blk.N.attn_kv_b.weight`); the file itself where there is none."""
    out = dict(ckpt.tensors)
    for kn in [n for n in out if n.endswith(".attn_k_b.weight")]:
        block = kn[: -len(".attn_k_b.weight")]
        vn = block + ".attn_v_b.weight"
        whole = f"{kn} + {vn}"
        tk, tv = out[kn], out.get(vn)
        if (tv is None or block + ".attn_kv_b.weight" in out or len(tk.shape) != 3 or len(tv.shape) != 3 or tk.dtype != tv.dtype
                or tk.dtype not in _FLOATS):
            continue
        (heads, rank, nope), (vh, v, vr) = tk.shape, tv.shape
        if (vh, vr) != (heads, rank) or not heads * rank * nope * v:
            continue
        j = Joined(Stored(ckpt, kn, tk.dtype), Stored(ckpt, vn, tv.dtype), nope, v, rank, True, LABEL)
        out[whole] = TensorInfo(whole, tk.dtype, (heads * (nope + v), rank), tk.file, None, tk.nbytes + tv.nbytes,
                                storage=f"mla:{whole}", extra={"mlx": j, "transform": LABEL})
        del out[kn], out[vn]
    if len(out) == len(ckpt.tensors):
        return ckpt
    return replace(ckpt, tensors=out, readers={f: _dispatch(ckpt.readers.get(f, read_flat_file)) for f in ckpt.files})
