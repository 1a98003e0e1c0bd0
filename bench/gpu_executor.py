"""`ckptstat run --device cuda` on a checkpoint of real size (Llama-3.2-1B's published config, random bf16 weights
written by transformers' save_pretrained), the way a user runs it: the CLI in a process of its own, its JSON kept.

    python bench/gpu_executor.py OUT.json      # on a GPU machine
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

import torch
import transformers as T

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from published_configs import MODELS  # noqa: E402

RUNS = [("sdpa", 4, 2048), ("eager", 2, 2048), ("sdpa", 1, 8192)]


def main(out: str) -> None:
    cfg_cls, model_cls, _, sizes = MODELS["Llama-3.2-1B"]
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        torch.manual_seed(0)
        with torch.device("cuda"):
            model = getattr(T, model_cls)._from_config(getattr(T, cfg_cls)(**sizes), dtype=torch.bfloat16)
        model.save_pretrained(tmp)
        del model
        torch.cuda.empty_cache()
        for attn, b, s in RUNS:
            cmd = [sys.executable, "-m", "ckptstat", "run", tmp, "--device", "cuda", "--dtype", "bf16", "--attn", attn,
                   "-b", str(b), "-s", str(s), "--warmup", "1", "--iters", "3", "--json"]
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            results.append({"cmd": " ".join(cmd[2:]), "rc": r.returncode, "stderr": r.stderr[-2000:],
                            "result": json.loads(r.stdout) if r.returncode == 0 and r.stdout else None})
            print(json.dumps(results[-1])[:1500], flush=True)
    with open(out, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
