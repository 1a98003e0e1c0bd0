"""The summary's quantisation block (analysis/quantized.py): method, logical parameters, stored bytes
and bits per weight, and the stored tensors by role."""
from __future__ import annotations

from rich.console import Console
from rich.text import Text

from .fmt import human_bytes, table
from .names import Name, fit_names, safe

_STANDARD_BITS = {8.0, 16.0, 32.0, 64.0}


def quantized_bits(r: dict) -> bool:
    """Whether the bucket table shows bits per weight: a quantised checkpoint, or any bucket whose
    stored bits per weight is not a plain 8/16/32/64 (GGUF block types)."""
    return bool(r.get("quantization")) or any(
        b.get("bits_per_weight") is not None and float(b["bits_per_weight"]) not in _STANDARD_BITS for b in r["buckets"])


def render_quantization(r: dict, console: Console) -> None:
    q = r.get("quantization")
    if not q:
        return
    line = Text("quantized    ").append_text(safe(q["method"])).append(f" (from {q['source']})")
    if q["weights"]:
        line.append(f": {q['weights']} weights, {q['logical_params']:,} logical parameters in "
                    f"{human_bytes(q['stored_bytes'])} = {q['bits_per_weight']:.3f} bits/weight")
    console.print(line)
    p = r["parameters"]
    if p.get("bits_per_weight"):
        console.print(Text(f"all weights  {p['unique']:,} logical parameters in {human_bytes(p['stored_bytes'])} = "
                           f"{p['bits_per_weight']:.3f} bits/weight (stored bytes x 8 / logical parameters)", style="dim"))
    if q["roles"]:
        t = table("Quantised weights' stored pieces", "role", "tensors", "bytes", "e.g.")
        for row in q["roles"]:
            t.add_row(row["role"], str(row["tensors"]), human_bytes(row["bytes"]), Name(row["example"]))
        console.print(fit_names(t, console, column=3))
    for note in q["notes"]:
        console.print(Text("note: ").append_text(safe(note)), style="yellow")
