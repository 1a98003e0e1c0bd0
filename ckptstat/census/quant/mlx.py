"""Apple MLX quantised weights (docs/quantized.md, MLX): their members, mode, bits, group size and logical shape.

mlx_lm (`mlx_lm.convert -q`, `mlx_lm/utils.py` quantize_model / save_model) replaces each Linear and Embedding
whose input size is a multiple of the group by mlx's QuantizedLinear / QuantizedEmbedding (`mlx/nn/layers/
quantized.py`; MoE experts stacked by its sanitize, `switch_mlp`: QuantizedSwitchLinear) and saves their parameters
as they are, per module `m`:
  - `m.weight` uint32 [..., out, in x bits / 32]: `mx.quantize`'s codes, 32 / bits to a word (3, 5, 6-bit codes
    run across words);
  - `m.scales` [..., out, in / group]: the compute dtype in mode `affine` (w = scales x q + biases), uint8 in
    mode `mxfp4` (E8M0, group 32), `nvfp4` (E4M3, group 16) and `mxfp8` (E8M0, group 32);
  - `m.biases` [..., out, in / group] (affine only; the group's offset, a zero point); `m.bias` stays a parameter;
  - `m.global_scale` (nvfp4 switch layers quantised with a tensor scale).
The group size is in no tensor: config.json's `quantization` (copied to `quantization_config`) holds the default
`{group_size, bits, mode}` and an entry per module quantised otherwise (`"model.layers.0.mlp.down_proj": {...}`;
`false`: left unquantised). mlx_lm's loader (`load_model`'s class_predicate, `infer_quant_config`) takes a
module's entry, else the input size of the model it builds from config.json (group = in / scale columns, bits =
word columns x 32 / in, the mode from the scales' dtype); so does this module (config.json's model: the family's
expected tensors), then the config's default, then an input size the checkpoint's other tensors show.
"""
from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from ...core import TensorInfo
from .quanto_hqq_torchao import ConfigShapes, Found

MEMBERS = ("weight", "scales", "biases", "global_scale")
AFFINE_BITS = (2, 3, 4, 5, 6, 8)   # mx.quantize's affine widths
AFFINE_GROUPS = (32, 64, 128)      # and group sizes
FP_MODES = {"nvfp4": (4, 16), "mxfp4": (4, 32), "mxfp8": (8, 32)}   # mode -> (bits, group): one pair each
DEFAULTS = {"affine": (4, 64), **FP_MODES}   # quantize_model's defaults_for_mode


def is_mlx(s: Mapping[str, TensorInfo]) -> bool:
    """A module holding mlx's quantised parameters: a uint32 `weight` with `scales` of its rows."""
    w, sc = s.get("weight"), s.get("scales")
    return (w is not None and sc is not None and w.dtype == "U32" and len(w.shape) >= 2
            and tuple(sc.shape[:-1]) == tuple(w.shape[:-1]))


def config(cfg: Mapping[str, Any] | None) -> dict[str, Any]:
    """mlx_lm's `quantization` (older mlx_lm wrote only it), else its `quantization_config` copy."""
    for key in ("quantization", "quantization_config"):
        q = (cfg or {}).get(key)
        if isinstance(q, dict) and "quant_method" not in q:
            return q
    return {}


def sizes(T: Mapping[str, TensorInfo]) -> set[int]:
    """Sizes the checkpoint shows for an input: every dim of the tensors that are no mlx member, and the rows of
    every packed weight (an up_proj's outputs are its down_proj's inputs)."""
    out: set[int] = set()
    for name, t in T.items():
        suffix = name.rpartition(".")[2]
        if suffix == "weight" and t.dtype == "U32" and len(t.shape) >= 2:
            out.add(t.shape[-2])
        elif suffix not in MEMBERS[1:]:
            out.update(d for d in t.shape if d > 1)
    return out


Fit = tuple[str, int, int]   # (mode, bits, group)


def _claim(entry: Mapping[str, Any]) -> Fit | None:
    """What an entry of config.json's `quantization` (or the whole, its default) asks for; nn.quantize hands a module's
    entry to `to_quantized`, so what the entry omits takes to_quantized's defaults (mode affine, the mode's pair)."""
    mode = str(entry.get("mode") or "affine")
    b, g = DEFAULTS.get(mode, (0, 0))
    bits, group = entry.get("bits") or b, entry.get("group_size") or g
    return (mode, bits, group) if isinstance(bits, int) and isinstance(group, int) else None


def mlx(prefix: str, s: Mapping[str, TensorInfo], q: Mapping[str, Any], expected: ConfigShapes, dims: set[int],
        notes: list[str]) -> Found:
    """The module's pieces, mode, bits and logical shape [..., out, in]: in = scale columns x group, the group from
    its config.json entry, else the input size config.json's model gives it, else the config's default, else an input
    size the checkpoint shows (`dims`), each checked against the packing."""
    w, sc = s["weight"], s["scales"]
    members = {prefix + k: s[k] for k in MEMBERS if k in s}
    words, groups = w.shape[-1], sc.shape[-1]
    fp = sc.dtype == "U8"    # mxfp4 / nvfp4 / mxfp8: E8M0 or E4M3 scales; affine scales are the compute dtype
    # every (mode, bits, group) mx.quantize could have written these shapes with: in = groups x group = words x 32 / bits
    fits: list[Fit] = [(m, b, g) for m, (b, g) in FP_MODES.items()] if fp else \
        [("affine", b, g) for b in AFFINE_BITS for g in AFFINE_GROUPS]
    fits = [f for f in fits if groups * f[2] * f[1] == words * 32]
    entry = q.get(prefix[:-1])
    claim = _claim(entry) if isinstance(entry, dict) else None
    chosen = claim if claim in fits else None
    if isinstance(entry, dict) and chosen is None:
        notes.append(f"config.json quantization[{prefix[:-1]!r}] {entry} does not fit {prefix}weight {list(w.shape)} and "
                     f"{prefix}scales {list(sc.shape)}: the layout is used")
    e = expected.get(prefix + "weight")
    if chosen is None and e:
        chosen = next((f for f in fits if groups * f[2] == e[-1]), None)
    if chosen is None and q:
        chosen = next((f for f in fits if f == _claim(q)), None)
    if chosen is None:
        seen = [f for f in fits if groups * f[2] in dims]
        chosen = next((f for f in seen if f[2] == DEFAULTS[f[0]][1]), seen[0] if seen else None)   # mlx_lm's group
        if chosen is not None and len({groups * f[2] for f in seen}) > 1:   # one note, however many weights
            notes.append("mlx keeps the group size in config.json's `quantization`, which names none here: where several "
                         "fit a weight's packing, mlx_lm's default group was used (the shapes may be wrong)")
    if chosen is None:
        chosen = fits[0] if fits else ("affine", 4, words * 32 // 4 // max(groups, 1))
        notes.append(f"{prefix}weight: no config.json entry and no other tensor gives its input size; read as "
                     f"{chosen[1]}-bit {chosen[0]}, group {chosen[2]}" + ("" if fits else " (no mlx mode fits its packing)"))
    mode, bits, group = chosen
    method = "mlx " + (f"affine {bits}-bit" if mode == "affine" else mode)
    return Found(prefix + "weight", (*w.shape[:-1], groups * group), method, bits, members)


# mlx_lm's sanitize (mlx_lm/models/<model_type>.py) saves some modules under other names than transformers':
# marker in the file's name -> what one tensor's first dimension counts
RESTACKS = {
    ".switch_mlp.": "experts",   # SwitchGLU: a MoE block's experts, one [experts, out, in] tensor a projection
    ".experts.gate_proj.": "experts",   # gpt-oss's SwitchGLU, named `experts`: gate_up_proj split, down_proj
    ".experts.up_proj.": "experts",
    ".experts.down_proj.": "experts",
    ".embed_q.": "heads",        # MLA (DeepSeek-V3, Kimi, GLM-4 MoE Lite...): kv_b_proj split per head into
    ".unembed_out.": "heads",    # embed_q [heads, kv_lora_rank, qk_nope] and unembed_out [heads, v_head, kv_lora_rank]
}
_EXPERT_INDEX = re.compile(r"\.experts\.(\d+)\.")


def restacked(missing: Mapping[str, tuple[int, ...]], unexpected: Mapping[str, tuple[int, ...]]
              ) -> list[dict[str, Any]]:
    """The modules mlx_lm's sanitize restacked (RESTACKS): a MoE block's experts, which it stacks from transformers'
    per-expert linears (`P.experts.{e}.w1`, `P.experts.{e}.gate_proj`...) or splits from the fused ones
    (`gate_up_proj`, GraniteMoE's `input_linear`) into `P.switch_mlp.{gate,up,down}_proj` [experts, out, in]
    (gpt-oss's `P.experts.{gate,up,down}_proj`); and
    MLA's `P.kv_b_proj`, split per head into `P.embed_q` and `P.unembed_out`. For each module P holding such tensors
    (`unexpected`, name -> shape), what the model has under P that the file lacks (`missing`; those under
    `P...experts.` where there are such) is one group with them when the two hold the same elements and count the
    same experts or heads: the tensors' first dimension N is one, and N is the number of distinct `experts.{e}`
    indices, or else divides the first dimension of every tensor the file lacks. A module that does not agree is
    left out: its tensors stay missing and unexpected."""
    blocks: dict[str, list[str]] = {}
    for name in unexpected:
        marker = next((m for m in RESTACKS if m in name), None)
        if marker:
            blocks.setdefault(name.partition(marker)[0], []).append(name)
    groups = []
    for block, stacked in sorted(blocks.items()):
        under = [n for n in missing if n.startswith(block + ".")]
        # a MoE block's expert tensors where transformers names them so (ERNIE 4.5's block also lacks the
        # e_score_correction_bias mlx_lm drops, which stays missing)
        lacking = sorted([n for n in under if ".experts." in n[len(block):]] or under)
        firsts = {unexpected[n][0] for n in stacked if len(unexpected[n]) >= 2}
        if not lacking or len(firsts) != 1 or any(len(unexpected[n]) < 2 for n in stacked):
            continue
        (n,) = firsts
        indices = {m.group(1) for x in lacking if (m := _EXPERT_INDEX.search(x[len(block):]))}
        counted = (len(indices) == n if indices else
                   all(len(missing[x]) >= 1 and missing[x][0] % n == 0 for x in lacking))
        elements = sum(math.prod(unexpected[x]) for x in stacked)
        if counted and elements == sum(math.prod(missing[x]) for x in lacking):
            kinds = sorted({RESTACKS[m] for m in RESTACKS for x in stacked if m in x})
            groups.append({"module": block, "of": "/".join(kinds), "count": n, "stacked": sorted(stacked),
                           "as": lacking, "elements": elements})
    return groups


def as_converted(cfg: dict[str, Any] | None, metadata: Mapping[str, str]) -> dict[str, Any] | None:
    """The config.json beside the weights, as the model mlx_lm converted where mlx wrote them (is_mlx_file): its
    save_config pops a multimodal wrapper's `vision_config` (utils.py save_config, keep_vision_config false unless the
    model keeps its vision tower), so a config nesting `text_config` without one is read with `vision_config` null: a
    wrapper without its tower, as families/wrappers.py reads Gemma 4's. Any other config as it is."""
    if cfg and is_mlx_file(metadata) and isinstance(cfg.get("text_config"), dict) and "vision_config" not in cfg:
        return {**cfg, "vision_config": None}
    return cfg


def is_mlx_file(metadata: Mapping[str, str]) -> bool:
    """A safetensors file mlx saved (`mx.save_safetensors(..., metadata={"format": "mlx"})`, mlx_lm's save)."""
    return metadata.get("format") == "mlx"


def channels_last(stored: tuple[int, ...], expected: tuple[int, ...]) -> bool:
    """mlx's Conv1d keeps its weight [out, kernel, in / groups] where torch's is [out, in / groups, kernel]: mlx_lm's
    sanitize moves the axis (`moveaxis(2, 1)`) of every conv1d it loads (Mamba, Mamba 2, Jamba, Nemotron-H,
    Falcon-H1, LFM2, Qwen3-Next, GraniteMoE-Hybrid...), and saves it so."""
    return len(stored) == len(expected) == 3 and tuple(stored) == (expected[0], expected[2], expected[1])
