"""The examples each command's --help ends with: one table, real invocations (the paths are the user's)."""
from __future__ import annotations

EXAMPLES: dict[str, tuple[str, ...]] = {
    "summary": ("ckptstat model.safetensors", "ckptstat summary ./llama --layers",
                "ckptstat hf://org/model --json"),
    "tensors": ("ckptstat tensors ./llama -f '*.q_proj.*'", "ckptstat tensors model.gguf --json > tensors.json"),
    "ties": ("ckptstat ties ./gpt2", "ckptstat ties ./bert --deep"),
    "diff": ("ckptstat diff base/ finetuned/ > changes.txt", "ckptstat diff a.safetensors b.gguf --names-only",
             "ckptstat diff base/ tuned/ --format html -o diff.html"),
    "flops": ("ckptstat flops ./llama -b 8 -s 512,2048", "ckptstat flops config.json -s 4096 --causal-halving",
              "ckptstat flops ./qwen2.5-vl -s 256 --images 2 --image-size 1024"),
    "memory": ("ckptstat memory ./llama -b 4 -s 8192 --gpu H100 --tp 2",
               "ckptstat memory ./llama -s 4096 --gpu T4 || echo 'does not fit'",
               "ckptstat memory ./llama --mode training --zero 3 --gpus 8 --gpu A100-80",
               "ckptstat memory ./gemma-3-27b -s 2048 --images 4 --gpu L40S"),
    "stats": ("ckptstat stats model.safetensors --layers", "ckptstat stats ./llama -f '*mlp*' --workers 4 --csv > s.csv",
              "ckptstat stats big.safetensors --scheduler tcp://scheduler:8786"),
    "plot": ("ckptstat plot model.safetensors -o weights.png", "ckptstat plot ./llama -o weights.svg --log-count"),
    "audit": ("ckptstat audit /mnt/zoo --out zoo.jsonl --workers 8",
              "ckptstat audit s3://bucket/models --out zoo.parquet --scheduler tcp://scheduler:8786"),
    "report": ("ckptstat report ./llama -o report.md", "ckptstat report model.gguf -o report.html --no-stats"),
    "scan": ("ckptstat scan pytorch_model.bin", "ckptstat scan ~/Downloads --json"),
    "trend": ("ckptstat trend ./output", "ckptstat trend lightning_logs/version_0/checkpoints -o trend.html",
              "ckptstat trend step_100.safetensors step_200.safetensors --json --workers 4"),
    "run": ("ckptstat run ./bert --device cuda -b 8 -s 128", "ckptstat run ./llama --dtype bf16 --json"),
}


def epilog(command: str) -> str:
    """--help's closing section for `command`: typer's markdown mode joins the lines of a paragraph, so each
    example is a paragraph of its own."""
    return "**Examples**\n\n" + "\n\n".join(f"`{line}`" for line in EXAMPLES[command])
