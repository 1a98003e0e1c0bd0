"""Python API helpers beyond open/summarize."""
from __future__ import annotations

from rich.console import Console

from .errors import UsageError
from .formats.registry import open_checkpoint
from .report import summarize


def bert_stat(path, input_size=(1, 1), config=None, show=True) -> dict:
    try:
        batch, seq = (int(x) for x in input_size)
    except (TypeError, ValueError):
        raise UsageError(f"input_size must be (batch, seq_length), got {input_size!r}") from None
    if batch < 1 or seq < 1:
        raise UsageError(f"input_size must be positive, got {input_size!r}")
    ckpt = open_checkpoint(path, config)
    r = summarize(ckpt)
    r["input_size"] = {"batch": batch, "seq": seq}
    if r.get("analytic") and "error" not in r["analytic"]:
        # FLOPs for Bertstat's input size (docs/flops_memory.md): matmul FLOPs, 2 per MAC, as FCM counts.
        from .arch import flops as fl
        from .arch.model import from_checkpoint
        from .arch.spec import check_seq

        model = from_checkpoint(ckpt)
        check_seq(model.spec, seq)  # a length the model cannot run is a usage error, as on the CLI
        totals = fl.run(model, batch, seq)["totals"]
        r["flops"] = {"batch": batch, "seq": seq, "flops": totals["flops"], "macs": totals["macs"],
                      "training_flops": totals["training_flops"], "elementwise_flops": totals["elementwise_flops"],
                      "rule": "matmul FLOPs = 2 x MACs (torch FlopCounterMode); training = 3 x forward"}
        r.setdefault("extra_lines", []).append(
            f"input_size   ({batch}, {seq}): forward {totals['flops']:,} FLOPs = {totals['macs']:,} MACs "
            f"(matmul, 2 per MAC); training x3")
    if show:
        from .render import render_summary

        render_summary(r, Console(highlight=False), show_layers=True)
    return r
