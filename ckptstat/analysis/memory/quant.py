"""Quantised weights in the memory planner: the layouts `--weights-dtype` names, their bytes per linear layer, and
a bare config's quantization_config read as the checkpoint it describes stores (and transformers 5 holds) its weights.

Which modules a config's quantizer converts (transformers/quantizers/quantizer_mxfp4.py, quantizer_finegrained_fp8.py):
 - mxfp4 (gpt-oss): replace_with_mxfp4_linear swaps only the experts of each GptOssMLP (Mxfp4GptOssExperts:
   gate_up_proj / down_proj as uint8 blocks of 2 fp4 values, a uint8 E8M0 scale per 32 along the input features;
   the experts' biases, the router, attention, embeddings and head keep the checkpoint's 16-bit dtype);
 - fp8 (FineGrainedFP8, DeepSeek-V3): replace_with_fp8_linear swaps every nn.Linear and the fused experts, 1 byte a
   weight + a float32 weight_scale_inv per weight_block_size block (one per tensor without a block size); the
   routers (not nn.Linear in transformers 5) and lm_head (get_keys_to_not_convert) stay.
Both skip `modules_to_not_convert` (quantizers_utils.should_convert_module's rule, applied to the template's names).
 - modelopt NVFP4 and FP8 (NVIDIA modelopt's export_hf_checkpoint; vLLM and TensorRT-LLM load it): every linear of
   the blocks but the routers, less `ignore`; per [out, in] weight the uint8 codes (two a byte), an E4M3 scale per 16
   inputs and a float32 weight_scale_2 (NVFP4), or float8 codes and one float32 weight_scale (FP8), and a float32
   input_scale where the config quantises the activations too;
 - gptq, awq (gptqmodel, which transformers 5 loads both with): every linear of the blocks but the routers, lm_head
   left alone (`lm_head: false`, gptqmodel's default); per [out, in] weight the int32 words of its `bits`-bit codes,
   a float16 scale and a `bits`-bit zero point (int32 words along the outputs) per group of `group_size` inputs (one
   group at -1), and GPTQ's int32 g_idx a input (as gptqmodel's TorchLinear and AWQ's GEMM modules store them).
"""
from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, replace

from ...errors import UsageError

# Quantised weights as the loaders store them: (rule, source). Bytes per linear layer in quant_bytes().
QUANTISED = {
    "int8": "int8 weight + fp32 scale per output row (bitsandbytes LLM.int8: Int8Params CB and SCB)",
    "nf4": "4-bit, 2 per byte + fp32 absmax per 64-weight block + a 16-entry fp32 code (bitsandbytes Params4bit "
           "and its QuantState, no double quantisation)",
    "fp4": "as nf4, with bitsandbytes' fp4 code",
    "int4": "4-bit, 8 per int32 + fp16 scale and 4-bit zero per 128 inputs + int32 g_idx (GPTQ, group_size 128)",
    "fp8": "float8 e4m3 + fp32 scale per 128x128 block (transformers FineGrainedFP8, DeepSeek-V3 layout)",
    "mxfp4": "uint8 blocks of 2 fp4 values + a uint8 E8M0 scale per 32 inputs, the routed experts' weights only "
             "(transformers Mxfp4GptOssExperts, the gpt-oss release)",
}
# the layouts whose transformers quantizer leaves the class's _keep_in_fp32_modules unconverted (not GPTQ's, int4's,
# nor modelopt's or compressed-tensors' packed ones): Quant.skip gains them (families/fp32_table.py unconverted)
KEEPS_FP32_MODULES = ("int8", "nf4", "fp4", "fp8", "mxfp4", "awq")
# Layouts only a config's quantization_config names (not --weights-dtype choices), bytes in Quant.bytes()
CONFIG_LAYOUTS = {
    "gptq": "{bits}-bit codes in int32 words + fp16 scale and {bits}-bit zero per {group} + int32 g_idx (GPTQ, "
            "as gptqmodel stores it)",
    "awq": "{bits}-bit codes in int32 words + fp16 scale and {bits}-bit zero per {group} (AWQ GEMM, as gptqmodel "
           "stores it)",
    "modelopt": "E2M1 codes two a byte + an E4M3 scale per 16 inputs + fp32 weight_scale_2{input} (NVIDIA modelopt "
                "NVFP4, as export_hf_checkpoint stores it)",
    "modelopt-fp8": "float8 E4M3 + one fp32 weight_scale{input} (NVIDIA modelopt FP8, as export_hf_checkpoint stores "
                    "it)",
    "compressed-tensors": "{ct} (compressed-tensors, as its compressors store it)",
}
MX_BLOCK = 32
# a MoE router (GptOssTopKRouter, DeepseekV3TopkRouter ...): a template's `(router)` label, or the module named in a
# path (the meta path's `layers[n].mlp.gate.weight`, GraniteMoeHybrid's `router.layer`)
ROUTER = re.compile(r"\(router\)|(^|\.)(router|gate)(\.|$)")


@dataclass(frozen=True)
class Quant:
    """One quantised layout applied to the planned model: its QUANTISED or CONFIG_LAYOUTS name, the modules it
    leaves alone (transformers-style names), fp8's block (None: one scale per tensor), where it came from, and the
    config layouts' bits, group and input scale."""
    name: str
    skip: tuple[str, ...] = ()
    block: tuple[int, int] | None = (128, 128)
    source: str = "--weights-dtype"
    bits: int = 4      # gptq, awq: a code's bits
    group: int = 128   # gptq, awq: inputs a scale (-1: one group); modelopt: 16
    input_scale: bool = False   # modelopt: an fp32 input_scale a linear (activations quantised too)
    ct: CTScheme | None = None  # compressed-tensors: its one config group's weights

    def converts(self, module: str) -> bool:
        """Whether a block linear of the op template (`layers[24].mlp.experts[32].gate_up_proj (top-4)`) is
        quantised: MXFP4 the experts only; every other layout every linear but the routers and the skipped modules
        (transformers' `should_convert_module`: an entry matching at the name's start, as a regex, or ending it). A
        MoE's experts are one module holding the fused projections (`mlp.experts`, its `gate_up_proj` a parameter):
        an entry matching that module's name leaves them all alone, as the quantizer tests that name."""
        name = hf_name(module)
        if self.name == "mxfp4" and ".experts." not in name:
            return False
        if ROUTER.search(module) or ROUTER.search(name):
            return False
        names = (name, name.rpartition(".")[0]) if ".experts." in name else (name,)
        return not any(rx.match(n) or n.endswith(k) for k, rx in _skipped(self.skip) for n in names)

    def leaving(self, modules: tuple[str, ...]) -> Quant:
        """This layout, leaving `modules` (the class's _keep_in_fp32_modules) unconverted too where its transformers
        quantizer does (KEEPS_FP32_MODULES)."""
        if not modules or self.name not in KEEPS_FP32_MODULES:
            return self
        return replace(self, skip=tuple(dict.fromkeys(self.skip + modules)))

    def bytes(self, fin: int, fout: int) -> float:
        if self.ct is not None:
            return self.ct.bytes(fin, fout)
        if self.name == "modelopt":   # (codes two a byte, an E4M3 scale a 16 inputs, the fp32 scalars)
            return -(-fin * fout // 2) + fout * -(-fin // 16) + 4 + 4 * self.input_scale
        if self.name == "modelopt-fp8":
            return fin * fout + 4 + 4 * self.input_scale
        if self.name in CONFIG_LAYOUTS:
            return grouped_bytes(fin, fout, self.bits, self.group, self.name == "gptq")
        return quant_bytes(self.name, fin, fout, self.block)

    def rule(self) -> str:
        what = "MXFP4 experts" if self.name == "mxfp4" else f"{self.name} linears of the blocks (routers excepted)"
        block = "" if self.name != "fp8" else f"; block {self.block[0]}x{self.block[1]}" if self.block else \
            "; one scale per tensor"
        skip = f"; modules_to_not_convert {', '.join(self.skip)}" if self.skip else ""
        layout = CONFIG_LAYOUTS[self.name].format(bits=self.bits, group=f"{self.group} inputs" if self.group > 0
                                                  else "output row", input=" + fp32 input_scale" * self.input_scale,
                                                  ct=self.ct.rule() if self.ct else "") \
            if self.name in CONFIG_LAYOUTS else QUANTISED[self.name]
        return f"{what}: {layout}{block}{skip}"


@dataclass(frozen=True)
class CTScheme:
    """compressed-tensors' weights of one config group (QuantizationArgs) in a compressor's format, and the bytes of
    the model's dtype its scales take: per [out, in] linear what the compressor stores (compressed_tensors
    compressors: pack-quantized's int32 words of `bits`-bit codes along the inputs and int64 weight_shape[2];
    int-/float-/naive-quantized's one byte a code; nvfp4's two codes a byte, an E4M3 scale a 16 inputs and fp32
    global scales; mxfp4's, mxfp6's and mxfp8's an E8M0 byte a 32, their codes two a byte, four in three, one a
    byte)."""
    fmt: str
    bits: int
    strategy: str                  # tensor, channel, group, block
    group: int
    block: tuple[int, int] | None
    symmetric: bool
    input_scale: bool              # an input scale a linear (static activations; nvfp4: its global one)
    scale_bytes: int

    def scales(self, fin: int, fout: int) -> int:
        if self.strategy == "group":
            return fout * -(-fin // self.group)
        if self.strategy == "block" and self.block:
            return -(-fout // self.block[0]) * -(-fin // self.block[1])
        return fout if self.strategy == "channel" else 1

    def bytes(self, fin: int, fout: int) -> int:
        if self.fmt == "nvfp4-pack-quantized":
            return -(-fin * fout // 2) + fout * -(-fin // 16) + 4 + 4 * self.input_scale
        if self.fmt in MX_BITS:   # codes (mxfp6: four in three bytes) and an E8M0 byte a 32 inputs
            return fout * -(-fin * MX_BITS[self.fmt] // 8) + fout * -(-fin // 32)
        n = self.scales(fin, fout)
        out = n * self.scale_bytes + self.input_scale * self.scale_bytes
        if self.fmt == "pack-quantized":
            out += 4 * fout * -(-fin * self.bits // 32) + 16
            if not self.symmetric:   # zero points packed along the outputs
                out += 4 * -(-fout * self.bits // 32) * (n // fout if n >= fout else 1)
            return out
        return out + fin * fout + (0 if self.symmetric else n)   # one byte a code (and an int8 zero point)

    def rule(self) -> str:
        how = {"group": f"a scale per {self.group} inputs", "channel": "a scale per output row",
               "tensor": "one scale", "block": f"a scale per {self.block[0]}x{self.block[1]} block" if self.block else ""}
        return (f"{self.fmt} {self.bits}-bit, {how.get(self.strategy, self.strategy)}"
                + ("" if self.symmetric else " and zero point") + (", an input scale" if self.input_scale else ""))


MX_BITS = {"mxfp4-pack-quantized": 4, "mxfp6-pack-quantized": 6, "mxfp8-quantized": 8}
CT_FORMATS = ("pack-quantized", "int-quantized", "float-quantized", "naive-quantized", "nvfp4-pack-quantized", *MX_BITS)


def ct_quant(q: dict, skip: tuple[str, ...], path: str, scale_bytes: int) -> tuple[Quant | None, str]:
    """A compressed-tensors quantization_config of one group of weights over every Linear, its format one of
    CT_FORMATS and lm_head left alone (the planner quantises the blocks' linears); else None and why."""
    groups = q.get("config_groups")
    fmt = str(q.get("format") or "")
    why = f"quantization_config quant_method 'compressed-tensors' ({fmt or 'no format'}) is not planned"
    if not isinstance(groups, dict) or len(groups) != 1:
        return None, f"{why}: {len(groups) if isinstance(groups, dict) else 'no'} config groups (one is)"
    (g,) = groups.values()
    w = g.get("weights") if isinstance(g, dict) else None
    fmt = str(g.get("format") or fmt) if isinstance(g, dict) else fmt
    ignore = [str(e) for e in q.get("ignore") or [] if isinstance(e, str)]
    if not isinstance(w, dict) or g.get("targets") != ["Linear"] or fmt not in CT_FORMATS \
            or not any(e.removeprefix("re:").rstrip("$").endswith("lm_head") for e in ignore) or q.get("sparsity_config"):
        return None, f"{why}: one group over every Linear, lm_head ignored, no sparsity, formats {', '.join(CT_FORMATS)}"
    bits, group, block = w.get("num_bits"), w.get("group_size") or 0, w.get("block_structure")
    strategy = str(w.get("strategy") or "tensor")
    if type(bits) is not int or not 1 <= bits <= 8 or type(group) is not int or group < 0 or \
            (strategy == "group" and not group) or (block is not None and not (isinstance(block, list) and len(block) == 2
                                                                              and all(type(x) is int and 0 < x <= 1 << 31
                                                                                      for x in block))):
        raise UsageError(f"{path}: quantization_config config_groups weights {str(w)[:120]} are not num_bits 1-8, a "
                         "positive group_size or two positive block sizes")
    acts = g.get("input_activations")   # a scale a linear where they are static; nvfp4's global one whatever they are
    input_scale = isinstance(acts, dict) and (fmt == "nvfp4-pack-quantized" or acts.get("dynamic", False) is False)
    regexes = tuple(e[3:] if e.startswith("re:") else re.escape(e) for e in ignore)
    skip = tuple(dict.fromkeys(skip + skip_entries({"ignore": list(regexes)}, ("ignore",), path)))
    scheme = CTScheme(fmt, bits, strategy, group, (block[0], block[1]) if block else None,
                      bool(w.get("symmetric", True)), input_scale, scale_bytes)
    return Quant("compressed-tensors", skip, None, f"config.json quantization_config (compressed-tensors {fmt})",
                 bits, group, input_scale, scheme), ""


MAX_SKIPPED = 10_000   # modules_to_not_convert / ignore entries (each tried against every module the plan names)


MAX_REPEATS = 4   # repetitions in one skipped-module regex: k in a row backtrack as the name's length to the k


def slow_regex(pattern: str) -> bool:
    """Whether a regex repeats (`*`, `+`, `{m,n}`) a group that itself holds a repetition or an alternation, at any
    depth (`(a+)+`, `((.*))*`, `(.|.)*`: backtracking exponential in the text; an optional group, `(.*\\.)?`, is
    not), or holds more than MAX_REPEATS repetitions (`.*` ten times over: a power of the text). Escapes and
    character classes are stepped over."""
    stack = [False]                        # per open group: does it hold a quantifier
    i, n, repeats = 0, len(pattern), 0
    while i < n:
        ch = pattern[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "[":                      # a class: to its closing bracket (a first `]` or `^]` is literal)
            i += 2 if pattern[i + 1:i + 2] in ("]", "^") else 1
            while i < n and pattern[i] != "]":
                i += 2 if pattern[i] == "\\" else 1
        elif ch == "(":
            stack.append(False)
            i += 1 if pattern[i + 1:i + 2] == "?" else 0   # (?: (?P< (?= ...: no quantifier
        elif ch == ")" and len(stack) > 1:
            inner = stack.pop()
            if inner and pattern[i + 1:i + 2] in ("*", "+", "{"):
                return True
            stack[-1] = stack[-1] or inner
        elif ch in "*+{|" and i > 0:     # (a repeated alternation backtracks the same way: `(.|.)*`)
            stack[-1] = True
            repeats += ch != "|"
        i += 1
    return repeats > MAX_REPEATS


@functools.cache
def _skipped(entries: tuple[str, ...]) -> tuple[tuple[str, re.Pattern[str]], ...]:
    """The skipped modules' entries compiled once (validated where Quant is made from a config: `skip_entries`)."""
    return tuple((k, re.compile(rf"(?:{k})(?:(?<=\.)|(?=\.|$))")) for k in entries)


def skip_entries(q: dict, keys: tuple[str, ...], path: str) -> tuple[str, ...]:
    """A quantization_config's lists of modules left alone, as transformers matches them (regexes): strings, at most
    MAX_SKIPPED, each a regex Python compiles and none with a quantified group holding a quantifier (`(a+)+`, whose
    matching takes time exponential in the name); else one line naming the entry."""
    out: list[str] = []
    for key in keys:
        entries = q.get(key) or ()
        if not isinstance(entries, (list, tuple)) or len(entries) > MAX_SKIPPED or \
                any(not isinstance(e, str) for e in entries):
            raise UsageError(f"{path}: quantization_config {key} is not a list of at most {MAX_SKIPPED:,} module names")
        for e in entries:
            if slow_regex(e) or len(e) > 1024:
                raise UsageError(f"{path}: quantization_config {key} entry {e[:80]!r} repeats a repetition, holds "
                                 f"more than {MAX_REPEATS} or is over 1,024 characters: matching it can take time "
                                 "exponential in a module's name, or a high power of it")
            try:
                re.compile(e)
            except re.error as err:
                raise UsageError(f"{path}: quantization_config {key} entry {e[:80]!r} is not a regular expression "
                                 f"({err})") from None
        out += entries
    return tuple(dict.fromkeys(out))


def hf_name(module: str) -> str:
    """The transformers module name of an op template's module, one layer standing for all:
    `layers[24 sliding].mlp.experts[32].down_proj (top-4)` -> `model.layers.0.mlp.experts.down_proj`."""
    name = re.sub(r"\s*\(.*\)$", "", module)
    name = re.sub(r"layers\[[^\]]*\]", "layers.0", name)
    name = re.sub(r"\[[^\]]*\]", "", name)
    return name if name.startswith(("model.", "lm_head")) else f"model.{name}"


def config_quant(q: dict | None, path: str = "config.json", scale_bytes: int = 2) -> tuple[Quant | None, str]:
    """(the layout a bare config's quantization_config stores its weights in, or None; a note when it names
    a method the planner does not model). Values the plan would divide by or match with are checked first: one line
    naming the key."""
    if not q:
        return None, ""
    method = str(q.get("quant_method") or "")
    skip = skip_entries(q, ("modules_to_not_convert",), path)
    src = f"config.json quantization_config ({method})"
    if method == "mxfp4" and not q.get("dequantize"):
        return Quant("mxfp4", skip, None, src), ""
    if method == "fp8" and not q.get("dequantize"):
        b = q.get("weight_block_size")
        if b is not None and not (isinstance(b, (list, tuple)) and len(b) == 2 and
                                  all(type(x) is int and 0 < x <= 1 << 31 for x in b)):
            raise UsageError(f"{path}: quantization_config weight_block_size = {str(b)[:80]} is not two positive "
                             "integers")
        return Quant("fp8", skip, (b[0], b[1]) if b is not None else None, src), ""
    algo = str(q.get("quant_algo") or "").upper()
    if method == "modelopt" and algo in ("NVFP4", "FP8"):
        groups = q.get("config_groups")
        acts = any(isinstance(g, dict) and isinstance(g.get("input_activations"), dict)
                   for g in (groups.values() if isinstance(groups, dict) else ()))
        ignore = skip_entries(q, ("ignore",) if q.get("ignore") else ("exclude_modules",), path)
        return Quant("modelopt" if algo == "NVFP4" else "modelopt-fp8", tuple(dict.fromkeys(skip + ignore)), None, src,
                     4, 16, acts), ""
    if method == "compressed-tensors":   # (scales in the model's dtype: `scale_bytes`)
        return ct_quant(q, skip, path, scale_bytes)
    bits, group = q.get("bits", q.get("w_bit")), q.get("group_size", q.get("q_group_size", 128))
    fmt = str(q.get("checkpoint_format") or q.get("format") or q.get("version") or "").lower()
    if (method in CONFIG_LAYOUTS and isinstance(bits, int) and bits in ((2, 3, 4, 8) if method == "gptq" else (2, 4, 8))
            and type(group) is int and (group > 0 or group == -1)
            and not q.get("lm_head") and not q.get("dynamic")
            and fmt in (("", "gptq", "gptq_v2") if method == "gptq" else ("", "gemm"))):
        return Quant(method, skip, None, src, bits, group), ""
    return None, f"quantization_config quant_method {method!r} is not planned: weights at the config's torch_dtype"


def grouped_bytes(fin: int, fout: int, bits: int, group: int, g_idx: bool) -> int:
    """Bytes of one GPTQ (g_idx) or AWQ GEMM [fout, fin] linear weight: the codes and zero points in int32 words,
    fp16 scales, one group a `group` inputs (-1: one)."""
    groups = -(-fin // group) if group > 0 else 1
    return (4 * -(-fin * fout * bits // 32) + 4 * groups * -(-fout * bits // 32) + 2 * groups * fout
            + (4 * fin if g_idx else 0))


def quant_bytes(q: str, fin: int, fout: int, block: tuple[int, int] | None = (128, 128)) -> float:
    """Bytes of one quantised [fout, fin] linear weight, scales included (QUANTISED names the layouts)."""
    n = fin * fout
    if q == "int8":
        return n + 4 * fout
    if q in ("nf4", "fp4"):
        return math.ceil(n / 2) + 4 * math.ceil(n / 64) + 4 * 16
    if q == "int4":
        groups = math.ceil(fin / 128)
        return n / 2 + groups * fout * 2 + groups * fout / 2 + 4 * fin
    if q == "fp8":
        return n + 4 * (math.ceil(fin / block[1]) * math.ceil(fout / block[0]) if block else 1)
    if q == "mxfp4":
        return fout * math.ceil(fin / MX_BLOCK) * (MX_BLOCK // 2 + 1)
    raise ValueError(q)
