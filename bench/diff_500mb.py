"""`ckptstat diff` on two ~500 MB safetensors checkpoints against a plain safe_open + numpy loop computing
the same figures (issue 20): wall time, peak RSS (os.wait4 of each process), and whether the figures agree.

The pair: LLaMA-shaped float32 tensors (hidden 1024, FFN 2816, 8 layers, vocab 8192, untied head) written
by safetensors' own numpy writer; B is A with the last two layers' MLP weights nudged (a "fine-tune") and
one norm cast to float16 and back. Each checkpoint is ~476 MB. Usage:
    python bench/diff_500mb.py [--out bench/results/diff_500mb.md]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _measure import emit, run_once  # noqa: E402

BUILD = r'''
import sys
import numpy as np
from safetensors.numpy import save_file
folder = sys.argv[1]
H, F, L, V = 1024, 2816, 8, 8192
rng = np.random.default_rng(0)
shapes = {"model.embed_tokens.weight": (V, H), "model.norm.weight": (H,), "lm_head.weight": (V, H)}
for i in range(L):
    p = f"model.layers.{i}."
    shapes.update({p + "self_attn.q_proj.weight": (H, H), p + "self_attn.k_proj.weight": (H, H),
                   p + "self_attn.v_proj.weight": (H, H), p + "self_attn.o_proj.weight": (H, H),
                   p + "mlp.gate_proj.weight": (F, H), p + "mlp.up_proj.weight": (F, H), p + "mlp.down_proj.weight": (H, F),
                   p + "input_layernorm.weight": (H,), p + "post_attention_layernorm.weight": (H,)})
a = {k: rng.standard_normal(s, dtype=np.float32) * 0.02 for k, s in shapes.items()}
save_file(a, f"{folder}/a.safetensors")
for k in a:
    if k.startswith(("model.layers.6.mlp.", "model.layers.7.mlp.")):
        a[k] += rng.standard_normal(a[k].shape, dtype=np.float32) * 1e-3
a["model.norm.weight"] = a["model.norm.weight"].astype(np.float16).astype(np.float32)
save_file(a, f"{folder}/b.safetensors")
print(sum(v.size for v in a.values()))
'''

# The loop a user writes today: every tensor of A and B whole, float64, the same three figures.
PLAIN = r'''
import json, sys
import numpy as np
from safetensors import safe_open
out = {}
with safe_open(sys.argv[1], "np") as fa, safe_open(sys.argv[2], "np") as fb:
    for name in fa.keys():
        a = fa.get_tensor(name).astype(np.float64).ravel()
        b = fb.get_tensor(name).astype(np.float64).ravel()
        d = a - b
        out[name] = {"max_abs": float(np.abs(d).max()), "rel_l2": float(np.linalg.norm(d) / np.linalg.norm(a)),
                     "cosine": float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))}
json.dump(out, open(sys.argv[3], "w"))
'''


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    args = ap.parse_args()
    py = sys.executable
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with tempfile.TemporaryDirectory() as folder:
        n = int(subprocess.run([py, "-c", BUILD, folder], check=True, capture_output=True, text=True).stdout)
        a, b = f"{folder}/a.safetensors", f"{folder}/b.safetensors"
        size = os.path.getsize(a)
        ours_json, plain_json = f"{folder}/ours.json", f"{folder}/plain.json"
        w1, r1, c1 = run_once([py, "-m", "ckptstat", "diff", a, b, "--json", "-o", ours_json], cwd=repo)
        w2, r2, c2 = run_once([py, "-c", PLAIN, a, b, plain_json])
        with open(ours_json) as f:
            ours = {t["name"]: t for t in json.load(f)["tensors"]}
        with open(plain_json) as f:
            plain = json.load(f)
    names = {k.removeprefix("model.") for k in plain}
    assert set(ours) == names, "the two runs compared different tensors"
    worst = {"max_abs": 0.0, "rel_l2": 0.0, "cosine": 0.0}
    for k, p in plain.items():
        o = ours[k.removeprefix("model.")]
        for m in worst:
            worst[m] = max(worst[m], abs(o[m] - p[m]) / max(abs(p[m]), 1e-300) if p[m] else abs(o[m] or 0.0))
    changed = sum(t["status"] != "equal" for t in ours.values())
    text = (f"`ckptstat diff A B --json` vs a plain `safe_open` + numpy loop (each tensor whole, float64) on two "
            f"LLaMA-shaped float32 safetensors files of {size / 2**20:.0f} MiB each ({n:,} parameters; B: the last two "
            f"layers' MLP nudged, the final norm through float16: {changed} tensors differ).\n"
            f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; one run each, "
            f"page cache warm after the build.\n\n"
            "| contender | wall | peak RSS | exit |\n|---|---|---|---|\n"
            f"| ckptstat diff (16 MiB chunks, streamed) | {w1:.1f} s | {r1:.0f} MiB | {c1} (1 = different, as diff(1)) |\n"
            f"| safe_open + numpy loop | {w2:.1f} s | {r2:.0f} MiB | {c2} |\n\n"
            f"Largest relative disagreement between the two over all tensors: max_abs {worst['max_abs']:.1e}, "
            f"rel_l2 {worst['rel_l2']:.1e}, cosine {worst['cosine']:.1e} (same figures; sums taken in a different "
            f"order).\n")
    emit(text, args.out)


if __name__ == "__main__":
    main()
