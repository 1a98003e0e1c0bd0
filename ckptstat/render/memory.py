"""`ckptstat memory`: the reference lines, then the planner's per-device lines and the verdict
(schema ckptstat.memory/1, `fit`). File-derived text goes through `safe`."""
from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from .fmt import arch_line, human_bytes, input_line, table
from .names import Name, safe


def _lines_table(title: str, lines: list[dict]) -> Table:
    t = table(title, "what", "size", "rule")
    t.columns[0].min_width = 18
    t.columns[1].no_wrap, t.columns[1].min_width = True, 9
    t.columns[2].justify = "left"
    group = None
    for line in lines:
        if line["group"] != group:
            group = line["group"]
            t.add_row(Name(Text(group, style="bold")), "", "")
        t.add_row(Name(Text("  ").append_text(safe(line["item"]))), human_bytes(line["bytes"]), Text(line["rule"], style="dim"))
    return t


def render_memory(r: dict, console: Console, seq_flag: str | None = "--seq", frames: bool = False) -> None:
    """`seq_flag`, `frames`: as render/__init__.py render_flops'."""
    p = r["parameters"]
    needs = r.get("needs_architecture")
    console.print(Text("model        unknown architecture") if needs else arch_line(r))
    head = Text(f"parameters   {p['count']:,} ({p['source']})")
    if p["active"] is not None:
        head.append(f"; active {p['active']:,}")
    console.print(head)
    if not needs:
        console.print(input_line(r, r["seq"], seq_flag, frames))
        console.print(Text(f"input        b={r['batch']}" + (f" s_dec={r['dec_seq']}" if r["dec_seq"] else "")
                           + f"; activations at {r['activation_bytes']} B/element"))
    console.print(_lines_table("Memory (exact bytes in --json)", r["lines"]))
    if needs:
        console.print(Text("needs an architecture (not shown): " + "; ".join(needs["lines"])), style="yellow")
        console.print(Text("why: ").append_text(safe(needs["reason"])), style="yellow")
    if "fit" in r:
        _render_fit(r["plan"], r["fit"], console)
    for note in r["notes"]:
        console.print(Text("note: ").append_text(safe(note)), style="yellow")


def _default(plan: dict) -> bool:
    return plan["mode"] == "inference" and plan["gpus"] == 1 and not plan["cpu_offload"] and not plan["weights_dtype"] \
        and not plan["kv_dtype"]


def _render_fit(plan: dict, f: dict, console: Console) -> None:
    if f["capacity_bytes"] is None and _default(plan):
        console.print(Text(f"per device   {human_bytes(f['per_device_bytes'])} for inference on one device, incl. "
                           f"a {human_bytes(plan['reserve'])} runtime reserve; --gpu NAME or --gpu-mem SIZE for a "
                           "verdict, --mode training, --tp/--pp/--zero for a plan"))
        return
    layout = f"{plan['gpus']} device(s): tp {plan['tp']} x pp {plan['pp']} x dp {plan['dp']}"
    what = f"{plan['mode']}"
    if plan["mode"] == "training":
        what += f", {plan['optimizer']}, ZeRO-{plan['zero']}" + (", checkpointing" if plan["checkpointing"] else "")
    if plan.get("autocast"):
        what += f", {plan['autocast']} autocast"
    if plan["cpu_offload"]:
        what += ", cpu offload"
    stage = f"; fullest pipeline stage: {f['stage']}" if f["stage"] != "all" else ""
    console.print(_lines_table(f"Per device: {what}; {layout}{stage}", f["lines"]))
    if f["host_lines"]:
        console.print(_lines_table("Host memory (--cpu-offload), not on the device", f["host_lines"]))
    if f["replicated"]:
        rep = ", ".join(f"{k} {v:,} params" for k, v in f["replicated"].items())
        console.print(Text(f"replicated on every tp rank: {rep}; sharded: {'; '.join(f['sharded'])}", style="dim"))
    dev = f["device"]
    total = human_bytes(f["per_device_bytes"])
    if f["capacity_bytes"] is None:
        console.print(Text(f"per device   {total}; no --gpu or --gpu-mem: no verdict"))
        return
    name = dev.get("name") or dev.get("gpu_mem")
    verdict = Text("fits" if f["fits"] else "does not fit", style="bold green" if f["fits"] else "bold red")
    console.print(Text("verdict      ").append_text(verdict).append(
        f": {total} per device of {human_bytes(f['capacity_bytes'])} ({name}); "
        + (f"headroom {human_bytes(f['headroom_bytes'])}" if f["headroom_bytes"] >= 0
           else f"short by {human_bytes(-f['headroom_bytes'])}")))
    if f["max_seq"] is not None:
        ctx = f.get("trained_context")
        beyond = f"; beyond the {ctx:,} tokens the model was configured for" if ctx and f["max_seq"] > ctx else ""
        console.print(Text(f"max --seq    {f['max_seq']:,} (bound: {f['max_seq_bound']}{beyond})"))
    elif f["max_seq_bound"]:
        console.print(Text(f"max --seq    n/a: {f['max_seq_bound']}"))
    console.print(Text(f"max --batch  {f['max_batch']:,} (bound: {f['max_batch_bound']})"))
    if dev.get("source"):
        read_as = "read as GiB" if dev.get("read_as", "GiB") == "GiB" else f"{human_bytes(f['capacity_bytes'])} to CUDA"
        console.print(Text(f"capacity     {dev['name']}: {dev['gb']} GB ({read_as}), {dev['source']}"
                           + (f"; {dev['note']}" if dev.get("note") else ""), style="dim"))
