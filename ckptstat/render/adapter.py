"""Rich tables for PEFT adapters (schema ckptstat.adapter/1) and diffusers pipelines (ckptstat.pipeline/1).
Every name from a file goes through `safe` / `name_line`."""
from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.text import Text

from .fmt import human, human_bytes, table
from .names import name_line, safe


def _n(v: int) -> str:
    return f"{v:,}" + (f" ({human(v)})" if v >= 1000 else "")


def _v(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def render_adapter(r: dict, console: Console) -> None:
    t, p = r["type"], r["parameters"]
    console.print(name_line("adapter      ", r["path"], f"  [{r['format']}, {len(r['files'])} file(s)]"))
    kind = Text("type         ").append_text(safe(t["name"])).append(" (PEFT ").append_text(safe(t["peft_type"]))
    kind.append_text(safe(f", task {t['task_type']}" if t["task_type"] else "")).append(")")
    for extra in t["extras"]:
        kind.append(f"; {extra}")
    console.print(kind)
    console.print(Text("kind         a PEFT adapter, not a whole model" +
                       ("" if r.get("base") else " (--base BASE: beside its base and merged model)"), style="dim"))
    if t["base_model"]:
        console.print(name_line("base named   ", t["base_model"], "  (adapter_config base_model_name_or_path)"))
    if r.get("training"):   # a Trainer's checkpoint-N/ (formats/training.py)
        from . import training_line

        console.print(Text("training     ").append_text(safe(training_line(r["training"]))))
    if held := r.get("optimizer_state"):
        console.print(Text(f"optimizer    {held['entries']:,} parameters' state in {held['tensors']:,} tensors "
                           f"({held['elements']:,} elements, {held['bytes']:,} bytes), counted apart"))
    rk = r["rank"]
    if rk["r"] is not None or rk["stored_ranks"]:
        line = f"rank         r={_v(rk['r'])}, alpha={_v(rk['alpha'])}"
        if rk["stored_ranks"] and rk["stored_ranks"] != [rk["r"]]:
            line += f"; ranks stored: {', '.join(map(str, rk['stored_ranks']))}"
        console.print(Text(line))
        for what in ("rank_pattern", "alpha_pattern"):
            if rk[what]:
                console.print(Text(f"{what:<13}").append_text(safe(", ".join(f"{k}: {v}" for k, v in rk[what].items()))))
    if r["target_modules"]:
        tm = r["target_modules"]
        console.print(Text("targets      ").append_text(safe(", ".join(tm) if isinstance(tm, list) else tm)))
    if r.get("target_parameters"):
        console.print(Text("parameters   ").append_text(safe(", ".join(r["target_parameters"]))))
    if r["prompt"]:
        console.print(Text("prompt       ").append_text(safe(", ".join(f"{k}={v}" for k, v in r["prompt"].items()))))
    head = Text(f"trainable    {_n(p['trainable'])}", style="bold")
    head.append(f"  = adapter {p['adapter']:,} + modules_to_save {p['modules_to_save']:,}"
                + (f" + biases {p['biases']:,}" if p["biases"] else ""))
    console.print(head)
    if p["shared_frozen"] or p["base_weights"]:
        console.print(Text(f"also stored  shared frozen {p['shared_frozen']:,}, base weights {p['base_weights']:,}; "
                           f"{p['stored']:,} in {p['tensors']} tensors"))
    console.print(Text(f"counting     {r['counting']}", style="dim"))

    if r["targets"]:
        tbl = table("Parameters per target module", "target", "modules", "rank", "alpha", "params")
        for g in r["targets"]:
            tbl.add_row(safe(g["target"]), str(g["modules"]), ", ".join(map(str, g["ranks"])) or "-",
                        ", ".join(map(_v, g["alphas"])) or "-", f"{g['params']:,}")
        console.print(tbl)
    mts = r["modules_to_save"]
    if mts["modules"]:
        tbl = table("modules_to_save (full copies, counted apart)", "module", "params", "tensors")
        for m in mts["modules"]:
            tbl.add_row(safe(m["module"]), f"{m['params']:,}", str(m["tensors"]))
        console.print(tbl)
    if r.get("base"):
        _render_base(r["base"], p, console)
    for n in r["notes"]:
        console.print(Text("note: ", style="yellow").append_text(safe(n)))


def _render_base(b: dict, p: dict, console: Console) -> None:
    tbl = table("Adapter beside its base model", "model", "params", "")
    tbl.add_row("base", f"{b['params']:,}", safe(b["path"]))
    tbl.add_row("adapter (trainable)", f"{p['trainable']:,}",
                f"{100 * b['adapter_share']:.3f}% of base" if b["adapter_share"] is not None else "")
    tbl.add_row("unmerged (base + adapter)", f"{b['unmerged']:,}", "peft's 'all params'")
    merged = b["merged"]
    how = f"{b['replaced_tensors']} tensor(s) replaced, {b['added_tensors']} added" if merged is not None else "not mergeable"
    tbl.add_row("merged", f"{merged:,}" if merged is not None else "-", how)
    console.print(tbl)
    if b["modules_found"]:
        console.print(Text(f"modules      {b['modules_found']} adapted module(s) found in the base", style="dim"))
    console.print(Text("merge rule   ", style="dim").append_text(safe(b["merge_rule"])))
    for n in b["notes"]:
        console.print(Text("note: ", style="yellow").append_text(safe(n)))


def render_pipeline(r: dict, console: Console) -> None:
    console.print(name_line("pipeline     ", r["path"], "  [diffusers model_index.json]"))
    console.print(Text("class        ").append_text(safe(r["pipeline"] or "-"))
                  .append_text(safe(f" (diffusers {r['diffusers_version']})" if r["diffusers_version"] else "")))
    tot = r["total"]
    console.print(Text(f"parameters   {_n(tot['params'])}  in {tot['components']} component(s) with weights",
                       style="bold"))
    console.print(Text(f"counting     {r['counting']}", style="dim"))
    tbl = table("Parameters per component", "component", "class", "params", "share", "bytes", "format")
    for c in r["components"]:
        if c["status"] != "weights":
            tbl.add_row(safe(c["component"]), safe(c["class"] or "-"), "-", "", "", safe(c["status"]))
            continue
        share = f"{100 * c['params'] / tot['params']:.2f}%" if tot["params"] else ""
        tbl.add_row(safe(c["component"]), safe(c["class"] or "-"), f"{c['params']:,}", share, human_bytes(c["bytes"]),
                    safe(c["format"]))
    tbl.add_row("total", "", f"{tot['params']:,}", "100%" if tot["params"] else "", human_bytes(tot["bytes"]), "")
    console.print(tbl)
    console.print(Text("status       absent: [null, null] in model_index.json; no weights: a scheduler, tokenizer "
                       "or processor", style="dim"))
    if tot["buffers"]:
        console.print(Text(f"buffers      {tot['buffers']:,} elements in non-parameter tensors, not counted", style="dim"))
