"""Rich tables from reports. Every string that came from a file goes through `safe` first."""
from __future__ import annotations

from rich.console import Console
from rich.text import Text

from .fmt import (  # noqa: F401  (re-exported)
    COMPONENTS_TITLE,
    DEFAULT_SEQ_RULE,
    LORA_TITLE,
    MODULE_LINES,
    UNPLACED_FAMILIES,
    arch_line,
    counts_text,
    human,
    human_bytes,
    image_text,
    input_line,
    lora_file_text,
    object_text,
    one_image,
    seq_line,
    seq_source,
    single_file_text,
    table,
)
from .names import Name, elide, fit_names, inert, name_line, safe  # noqa: F401  (re-exported: one place for names)
from .rows import print_rows


def training_line(t: dict) -> str:
    """`Hugging Face Trainer, step 3, epoch 0.75, learning rate 0.00333 (trainer_state.json log_history)`."""
    parts = [str(t.get("library"))]
    parts += [f"{k} {t[k]:.6g}" if isinstance(t[k], float) else f"{k} {t[k]}"
              for k in ("global_step", "epoch") if t.get(k) is not None]
    if t.get("learning_rate") is not None:
        parts.append(f"learning rate {t['learning_rate']:.6g}"
                     + (f" ({t['learning_rate_from']})" if t.get("learning_rate_from") else ""))
    return ", ".join(parts).replace("global_step", "step")


def optimizer_mapping_lines(rows: list[dict]) -> list[str]:
    """Which parameter each optimizer state belongs to, per state and group: `optimizer.state group 0: 9 of 9
    derived from named_parameters on the meta device` or `... none: <why>` (analysis/optimizer_names.py)."""
    out = []
    for x in rows:
        where = x["state"] + (f" group {x['group']}" if "group" in x else "")
        what = (f"{x['mapped']} of {x['parameters']} " if "parameters" in x else f"{x['mapped']} ") + x["mapping"]
        out.append(f"{where}: {what}" + (f" ({x['reason']})" if x.get("reason") else ""))
    return out


OBJECT_LINES = 8   # non-tensor items listed by the summary; --json has them all


def _render_objects(objects: dict, console: Console) -> None:
    """A DCP folder's non-tensor items: `step = 7  (1,261 bytes)`, or why its value is not shown."""
    shallow_first = sorted(objects.items(), key=lambda kv: kv[0].count("."))   # `step`, `lr` before param_groups'
    for i, (name, o) in enumerate(shallow_first[:OBJECT_LINES]):
        what = f"= {object_text(o)}" if "value" in o else object_text(o)
        console.print(Text("objects      " if i == 0 else " " * 13).append_text(
            safe(f"{name} {what}  " + (f"({o['bytes']:,} bytes)" if "bytes" in o else f"({o.get('file')})"))))
    if len(objects) > OBJECT_LINES:
        console.print(Text(" " * 13 + f"... {len(objects) - OBJECT_LINES} more non-tensor item(s) (--json lists them)"))


def render_summary(r: dict, console: Console, show_layers: bool = False, seq_flag: str | None = None) -> None:
    """`seq_flag`: the option that set the analytic line's length (`summary --seq`), None for the default."""
    a = r["architecture"]
    arch = a["family"] + (f" ({a['model_type']})" if a["model_type"] and a["model_type"] != a["family"] else "")
    if a["architectures"]:
        arch += " " + ", ".join(a["architectures"])
    console.print(name_line("checkpoint   ", r["path"], f"  [{r['format']}, {len(r['files'])} file(s)]"))
    console.print(Text("architecture ").append_text(safe(arch)).append(f" (from {a['source']})"))
    console.print(name_line("config       ", r["config"] or ("none: the GGUF metadata" if r.get("gguf") else "none found")))
    for label, line in (r.get("gguf") or {}).items():   # a GGUF file's own metadata (formats/gguf_meta.py)
        console.print(Text(f"{label:<13}").append_text(safe(line)))
    if r.get("training"):   # a Trainer / Lightning / DeepSpeed checkpoint (formats/training.py)
        console.print(Text("training     ").append_text(safe(training_line(r["training"]))))
        for line in optimizer_mapping_lines(r["training"].get("optimizer_mapping") or []):
            console.print(Text("optimizer    ").append_text(safe(line)))
    _render_objects(r.get("objects") or {}, console)
    only = r.get("optimizer_state") if r.get("model_weights") is False else None
    if only:   # a file of optimizer state alone (a Trainer's optimizer.pt): what it holds, no model tables
        from ..census import optimizer_only_text

        console.print(Text("contents     ").append_text(safe(optimizer_only_text(only))), style="bold")
    else:
        _render_parameters(r, console, show_layers)

    if r["non_parameters"]:
        t = table("Not parameters (counted apart)", "role", "tensors", "elements", "bytes", "e.g.")
        for n in r["non_parameters"]:
            t.add_row(n["role"], str(n["tensors"]), f"{n['elements']:,}", human_bytes(n["bytes"]), Name(n["names"][0]))
        console.print(fit_names(t, console, column=4))
    if a["family"] in UNPLACED_FAMILIES and r.get("modules"):
        _render_modules(r["modules"], console)
    elif r["unplaced"] and not r.get("single_file") and not r.get("lora_file"):   # (their tables place every tensor)
        console.print(Text(f"{len(r['unplaced'])} parameter tensor(s) no rule placed (bucket 'other'):"))
        for name in r["unplaced"]:
            console.print(name_line("  ", name))
    s = r["storage"]
    if s["overhead_bytes"] >= 0:
        console.print(Text(f"storage      file {s['file_bytes']:,} B = tensors {s['tensor_bytes']:,} B "
                           f"+ headers/padding {s['overhead_bytes']:,} B"))
    else:   # compressed members (np.savez_compressed, a recompressed zip, zstd DCP items): no negative padding
        console.print(Text(f"storage      file {s['file_bytes']:,} B holds tensors of {s['tensor_bytes']:,} B "
                           f"compressed ({s['tensor_bytes'] / max(s['file_bytes'], 1):.1f}x)"))
    an = r.get("analytic")
    if an and "error" in an:
        console.print(Text("analytic     not available: ").append_text(safe(an["error"])), style="dim")
    elif an:
        if an.get("input") == "mel frames":   # Whisper: the encoder reads frames, the decoder tokens
            console.print(Text(f"input        {an['seq']} mel frames ({seq_source(seq_flag, frames=True)}), "
                               f"decoder {an['dec_seq']} tokens (128 or its positions if fewer)"))
            at = f" per frame at {an['seq']} frames"
        else:   # tokens, or an image model's one image (ViT, ResNet...: no sequence length)
            console.print(input_line(an, an["seq"], seq_flag))
            at = " per image" if image_text(an) else f"/token at seq {an['seq']}"
        if an.get("active_params") is not None:   # a mixture of experts: what one token runs through
            console.print(Text(f"active       {an['active_params']:,} parameters per token (top-k experts; "
                               f"{an['predicted_params']:,} in all)"))
        console.print(Text(f"forward      {human(an['flops_per_token'])} FLOPs{at} "
                           f"(matmul FLOPs = 2 x MACs); training 3x"))
        console.print(Text(f"weights      {human_bytes(an['weight_bytes'])} as stored; "
                           f"{human_bytes(an['weight_bytes_bf16'])} in bf16"))
        if an["agree"] is False:
            source = "the config" if r["config"] else "the architecture the tensor names show"
            console.print(Text(f"analytic     {source} predicts {an['predicted_params']:,} parameters, "
                               f"the checkpoint holds {r['parameters']['unique']:,}"), style="yellow")
        elif an.get("outside_params"):   # a multimodal wrapper: its towers and projectors beside the language model
            console.print(Text(f"analytic     {an['predicted_params']:,} parameters the config predicts (the language "
                               f"model) + {an['outside_params']:,} outside it "
                               f"({', '.join(an.get('outside_modules') or ['towers, projectors'])}), counted from the "
                               "checkpoint and not in the FLOPs per token"))
        if im := an.get("image"):   # a wrapper whose image path is modelled (families/images/)
            console.print(Text(f"image        {one_image(im, human(im['flops']))} (flops --images N)" if im["side"]
                               else "image        any size: flops --images N --image-size S counts its tokens and its "
                               "vision tower's FLOPs"))
    for line in r.get("extra_lines", []):
        console.print(safe(line))
    console.print(Text("ties         ").append_text(safe(r["ties"]["text"])))
    for note in r["notes"]:
        console.print(Text("note: ").append_text(safe(note)), style="yellow")





def _render_components(one: dict, total: int, console: Console) -> None:
    """A diffusion pipeline in one file, by component (analysis/summary.py single_file)."""
    console.print(Text("one file     ").append_text(safe(single_file_text(one))))
    t = table(COMPONENTS_TITLE, "component", "params", "share", "bytes", "tensors", "buffers")
    for c in one["components"]:
        t.add_row(c["component"], f"{c['params']:,}", f"{100 * c['params'] / total:.2f}%" if total else "-",
                  human_bytes(c["bytes"]), str(c["tensors"]), str(c["buffers"]))
    console.print(t)


def _render_lora_file(lora: dict, console: Console) -> None:
    """A LoRA file without a PEFT config (analysis/summary.py lora_file_report)."""
    console.print(Text("lora file    ").append_text(safe(lora_file_text(lora))))
    t = table(LORA_TITLE, "part", "modules", "params", "network", "ranks")
    for p in lora["parts"]:
        t.add_row(p["part"], str(p["modules"]), f"{p['params']:,}", counts_text(p["networks"]), counts_text(p["ranks"]))
    console.print(t)


def _render_parameters(r: dict, console: Console, show_layers: bool) -> None:
    """The parameter count and its tables: by bucket (quantisation beside), by layer, by stored dtype."""
    p = r["parameters"]
    head = Text()
    head.append(f"parameters   {p['unique']:,}" + (f" ({human(p['unique'])})" if p["unique"] >= 1000 else ""), style="bold")
    head.append(f"  in {p['tensors']} tensors")
    if p["aliases"]:
        head.append(f"; {len(p['aliases'])} aliased name(s) counted once")
    if p.get("partial"):
        head.append("  PARTIAL: ", style="bold yellow").append_text(safe(p["partial"]))
    console.print(head)
    console.print(Text("counting     unique parameters, a tied weight once; buffers and training state apart",
                       style="dim"))
    if p.get("on_load"):   # the class holds parameters the file does not, or in another size (families/load_table.py)
        d = p["on_load"]["params"] - p["unique"]
        n = len(p["on_load"]["differences"])
        console.print(Text(f"on load      {p['on_load']['params']:,} in model.parameters() of the class ({d:+,}: {n} "
                           "tensor(s) it recreates or resizes on load; `ckptstat ties` lists them)", style="yellow"))

    if p.get("recorded"):   # transformers' own count at save (the index's total_parameters)
        rec = p["recorded"]
        console.print(Text(f"recorded     {rec['count']:,} by transformers at save (the index's total_parameters): " + (
            "the same" if not rec["difference"] else f"{rec['difference']:+,} against {rec['expected']:,}, the count "
            "model.parameters() would have (a file edited since, or a quantised model's packed weights)"),
            style="dim" if not rec["difference"] else "yellow"))

    from .quantized import quantized_bits, render_quantization  # it imports this module's helpers

    if r.get("lora_file"):   # a LoRA file: its modules by part, not buckets of a model
        _render_lora_file(r["lora_file"], console)
        _render_dtypes(r, console)
        return
    if r.get("single_file"):   # a diffusion pipeline in one file: its components, not the transformer buckets
        _render_components(r["single_file"], p["unique"], console)
        render_quantization(r, console)
        _render_dtypes(r, console)
        return
    bits = quantized_bits(r)   # bits per weight per bucket, shown for quantised checkpoints
    t = table("Parameters by bucket", "bucket", "params", "share", "bytes", *(("bits/weight",) if bits else ()), "tensors")
    for b in r["buckets"]:
        t.add_row(b["bucket"], f"{b['params']:,}", f"{100 * b['share']:.2f}%", human_bytes(b["bytes"]),
                  *((f"{b['bits_per_weight'] or 0:.2f}",) if bits else ()), str(b["tensors"]))
    console.print(t)
    render_quantization(r, console)

    if show_layers and r["layers"]:
        t = table("Parameters by layer", "bucket.layer", "params", "bytes", "tensors")
        for row in r["layers"]:
            t.add_row(f"{row['bucket']}.{row['layer']}", f"{row['params']:,}", human_bytes(row["bytes"]), str(row["tensors"]))
        console.print(t)
    _render_dtypes(r, console)


def _render_dtypes(r: dict, console: Console) -> None:
    t = table("Parameters by stored dtype", "dtype", "params", "bytes", "tensors")
    for d in r["dtypes"]:
        t.add_row(d["dtype"], f"{d['params']:,}", human_bytes(d["bytes"]), str(d["tensors"]))
    console.print(t)


def _render_modules(nodes: list[dict], console: Console) -> None:
    """The summary's module tree (unknown architecture): a total per node; a numbered block `x N` shows
    its total over all N, and its children one block's figures."""
    t = table("Parameters by module (no analytic model; numbered blocks collapsed)", "module", "params", "bytes",
               "tensors")
    rows: list[tuple[int, dict]] = []

    def walk(ns: list[dict], depth: int) -> None:
        for n in ns:
            rows.append((depth, n))
            walk(n["children"], depth + 1)

    walk(nodes, 0)
    for depth, n in rows[:MODULE_LINES]:
        label = Text("  " * depth).append_text(safe(n["name"]))
        if n["repeat"] > 1:
            label.append(f" x{n['repeat']}", style="bold")
        t.add_row(Name(label), f"{n['params']:,}", human_bytes(n["bytes"]), str(n["tensors"]))
    console.print(fit_names(t, console))
    if len(rows) > MODULE_LINES:
        console.print(Text(f"... {len(rows) - MODULE_LINES} more module(s): --json has the whole tree", style="dim"))


_ROLE_TAG = {"buffer": "buf", "non-trainable": "ntr", "metric": "met", "optimizer": "opt", "counter": "ctr"}


def render_tensors(r: dict, console: Console) -> None:
    rows = []
    for row in r["tensors"]:
        bucket = row["bucket"] + (f".{row['layer']}" if row["layer"] is not None else "")
        if row["role"] != "parameter":
            bucket += f" {_ROLE_TAG.get(row['role'], row['role'])}"
        shape = "x".join(map(str, row["shape"])) or "scalar"
        if row.get("logical_shape") and row["role"] in ("packed-weight", "quantized-weight"):
            shape += " -> " + "x".join(map(str, row["logical_shape"]))   # a quantised weight's logical shape
        rows.append((inert(row["name"]), inert(row["alias_of"]) if row["alias_of"] else None,
                     (bucket, row["dtype"], shape, f"{row['numel']:,}", human_bytes(row["bytes"]))))
    n = len(r["tensors"])
    t = table(f"{n} tensor{'' if n == 1 else 's'} (buf = buffer, ntr = non-trainable, met = metric, opt = optimizer state, "
              "ctr = counter)", "name", "bucket", "dtype", "shape", "numel", "bytes")
    for c in t.columns[1:]:
        c.no_wrap = True  # numbers never fold; names give way, elided in the middle
    print_rows(console, t, rows)


def _shape(shape: list[int]) -> str:
    return "x".join(map(str, shape)) or "1"


def _group(module: str) -> tuple[str, str] | None:
    r"""A module inside a repeated stack: "encoder.layer[12].attention.self.query" -> (group, rest): up to the
    first `]` that has a `[` since the `]` before it and a `.` after it. (The regex `^(.*?\[[^\]]*\])\.(.*)$`
    says the same, but retried `[^\]]*` from every `[`: quadratic in a name of `[`s.)"""
    if "\n" in module:
        return None
    start = 0
    while (close := module.find("]", start)) >= 0:
        if module[close + 1:close + 2] == "." and module.find("[", start, close) >= 0:
            return module[:close + 1], module[close + 2:]
        start = close + 1
    return None


def render_flops(r: dict, console: Console, seq_flag: str | None = "--seq", frames: bool = False) -> None:
    """`seq_flag`: the option that set the sequence length (commands/common.py `seq_flag`), None for the default
    (`families.framework.spec.default_seq`'s; `frames`: an audio encoder's, `audio_inputs`')."""
    p = r["parameters"]
    console.print(arch_line(r))
    console.print(name_line("source       ", r["config"] or r["path"]))
    head = Text(f"parameters   {p['predicted']:,} predicted from the architecture")
    if p["checkpoint"] is not None:
        outside = f", with {p['outside']:,} outside the analytic model" if p.get("outside") else ""
        head.append(f"; checkpoint {p['checkpoint']:,} (" + ("agree" if p["agree"] else "DISAGREE") + f"{outside})",
                    style=None if p["agree"] else "bold yellow")
    if p["active"] is not None:
        head.append(f"\nactive       {p['active']:,} per token (top-k experts)")
    console.print(head)
    console.print(input_line(r, [run["seq"] for run in r["runs"]], seq_flag, frames))
    if im := r["runs"][0].get("images"):
        each = im["tokens_each"]
        states = f", {im['states_each']:,} states each into its cross-attention layers" if im.get("states_each") else ""
        console.print(Text(f"images       {im['per_sequence']} a sequence, {im['side']}x{im['side']} px, "
                      f"{each} token{'s' if each != 1 else ''} each into the language model (s = {im['text_tokens']} "
                      f"text + {im['per_sequence']} x {each}){states}; "
                      f"their vision tower and projector {human(im['flops'])} FLOPs over the batch, in the table: "
                      f"{im['rule']}"))   # (Text: the rule quotes config values, never markup)
    image = image_text(r)
    conv = r["convention"]["name"]
    console.print(Text(f"convention   {conv}: {r['convention']['rule']}", style="dim"))
    console.print(Text(f"counting     {r['counting']['flops']}; {r['counting']['attention']}", style="dim"))
    console.print(Text(f"head         {r['counting']['head']}", style="dim"))
    first = r["runs"][0]
    macs_col = "MACs" if conv != "flops" else "FLOPs"
    t = table(f"Per module, forward, b={r['batch']} " + (f"one {image}" if image else f"s={first['seq']}")
               + (f" s_dec={first['dec_seq']}" if first["dec_seq"] else "") + " (shapes per sample, sums over calls)",
               "module", "in/out", "params", macs_col, "elem.", "read/write")
    for c in t.columns[1:]:
        c.no_wrap = True
    group = None
    for m in first["modules"]:
        val = m["macs"] if conv != "flops" else m["flops"]
        g = _group(m["module"])
        name = Name(m["module"])
        if g:
            if g[0] != group:
                group = g[0]
                t.add_row(Name(Text(f"{group} x{m['calls']}", style="bold")), "", "", "", "", "")
            name = Name(Text("  ").append_text(safe(g[1])))
        else:
            group = None
        t.add_row(name, f"{_shape(m['in_shape'][1:])}\n{_shape(m['out_shape'][1:])}",
                  human(m["params"]) if m["params"] else "", human(val) if val else "",
                  human(m["elementwise_flops"]) if m["elementwise_flops"] else "",
                  f"{human_bytes(m['bytes_read'], True)}\n{human_bytes(m['bytes_written'], True)}")
    tt = first["totals"]
    t.add_row(Text("total", style="bold"), "", human(p["predicted"]), human(tt["macs"] if conv != "flops" else tt["flops"]),
              human(tt["elementwise_flops"]), f"{human_bytes(tt['bytes_read'], True)}\n{human_bytes(tt['bytes_written'], True)}")
    console.print(fit_names(t, console))
    per = ["image"] if image else ["seq", "tokens"]
    s = table("Totals (matmul FLOPs = 2 x MACs; elem. = element-wise estimate)", *per, "fwd FLOPs",
               *([] if image else ["FLOPs/token"]), "MACs", "train FLOPs", "elem. fwd")
    if conv == "bertstat":
        s.add_column("Bertstat MAdd", justify="right")
    for run in r["runs"]:
        x = run["totals"]
        row = [image] if image else [str(run["seq"]), f"{run['tokens']:,}"]
        row += [human(x["flops"]), *([] if image else [human(x["flops_per_token"])]), human(x["macs"]),
                human(x["training_flops"]), human(x["elementwise_flops"])]
        if conv == "bertstat":
            row.append(human(x["bertstat_madd"]))
        s.add_row(*row)
    console.print(s)
    at = f"per {image}" if image else f"at s={first['seq']}"
    console.print(Text(f"exact        forward FLOPs {at}: {first['totals']['flops']:,}; MACs {first['totals']['macs']:,}"))
    for note in r["notes"] + [n for run in r["runs"] for n in run["notes"]]:
        console.print(Text("note: ").append_text(safe(note)), style="yellow")
def render_ties(r: dict, console: Console) -> None:
    tw = r["tie_word_embeddings"]
    console.print(name_line("checkpoint   ", r["path"], f"  [{r['format']}]"))
    console.print(name_line("config       ", r["config"] or "none found",
                            f"  (tie_word_embeddings: {'unknown' if tw is None else str(tw).lower()})"))
    if r["ties"]:
        console.print(Text("Tied weights", style="italic"))
        for tie in r["ties"]:
            console.print(name_line("  ", tie["alias"], f"  ({tie['numel']:,} elements)"))
            console.print(name_line("    = ", tie["target"], Text(f"  [{tie['evidence']}; {tie['status']}]", style="dim")))
    else:
        console.print("No tied weights found" + ("" if r["deep"] else " (headers and config; --deep also compares contents)"))
    if r.get("declined"):
        console.print(Text("Not tied (the copies differ)", style="italic"))
        for tie in r["declined"]:
            console.print(name_line("  ", tie["alias"], f"  ({tie['numel']:,} elements)"))
            console.print(name_line("    != ", tie["target"], Text(f"  [{tie['evidence']}]: {tie['why']}", style="dim")))
    rows = r["counting"]["rows"]
    base = rows[0]["params"]
    t = table("Parameter counts by convention", "convention", "params", "vs unique")
    for row in rows:
        diff = row["params"] - base
        t.add_row(row["convention"], f"{row['params']:,}", f"{diff:+,}" if diff else "")
    console.print(t)
    for row in rows[1:]:
        if row["differences"]:
            console.print(Text(f"{row['convention']} ({row['equals']}):", style="bold"))
            for d in row["differences"]:
                console.print(name_line(f"  {d['elements']:+,}  ", d["name"], Text(": ").append_text(safe(d["why"]))))
    cc = r["cross_check"]
    if not cc["available"]:
        console.print(Text("config check not available: ").append_text(safe(cc["reason"])), style="dim")
    else:
        line = Text("config check (", style="bold").append_text(safe(cc["architecture"] or cc["head"]))
        line.append(f"): {cc['expected']} tensors expected; {len(cc['missing'])} missing, "
                    f"{len(cc['unexpected'])} unexpected, {len(cc['shape_mismatches'])} shape mismatch(es)")
        console.print(line)
        from ..analysis.ties import relaid_text, restacked_text

        if cc["restacked"]:
            console.print(Text("  restacked   ").append_text(safe(restacked_text(cc["restacked"]))))
        if cc["relaid"]:
            console.print(Text("  relaid      ").append_text(safe(relaid_text(cc["relaid"]))))
        for m in cc["missing"]:
            console.print(name_line("  missing     ", m["name"], Text(": ").append_text(safe(m["why"]))))
        for u in cc["unexpected"]:
            console.print(name_line("  unexpected  ", u["name"], f" {u['shape']}"))
        for m in cc["shape_mismatches"]:
            console.print(name_line("  shape       ", m["name"], f" file {m['file']} vs config {m['config']}"))
    nc = r["counting"]["not_counted"]
    if nc:
        console.print(Text(f"not counted in any row: {len(nc)} tensor(s), {sum(d['elements'] for d in nc):,} "
                           f"elements (buffers, optimizer state, counters)"))


def render_run(r: dict, console: Console) -> None:
    lat, fl, mem = r["latency"], r["flops"], r["peak_memory"]
    console.print(name_line("checkpoint   ", r["path"], f"  -> {r['model_class']}"))
    console.print(f"run          {r['device']}, {r['dtype']}, attn {r['attn']}, batch {r['batch']} x seq {r['seq']}, "
                  f"{r['iters']} timed runs after {r['warmup']} warm-up")
    t = table("Measured vs analytic", "quantity", "measured", "analytic", "difference")
    diff = f"{100 * fl['difference']:+.3f}%" if fl["difference"] is not None else ""
    t.add_row("forward FLOPs (matmul)", f"{fl['measured']:,}", f"{fl['analytic']:,}" if fl["analytic"] else "n/a", diff)
    t.add_row("latency median", f"{1e3 * lat['median_s']:.2f} ms", "", "")
    t.add_row("latency min / max", f"{1e3 * lat['min_s']:.2f} / {1e3 * lat['max_s']:.2f} ms", "", "")
    t.add_row("throughput", f"{r['throughput_tokens_per_s']:,.0f} tok/s", "", "")
    t.add_row("achieved", f"{fl['achieved_flop_per_s'] / 1e9:,.2f} GFLOP/s", "", "")
    analytic_mem = mem.get("analytic_bytes")
    t.add_row("peak memory", human_bytes(mem["bytes"]), human_bytes(analytic_mem) if analytic_mem else "", "")
    console.print(t)
    console.print(Text(f"FLOPs: {fl['counter']}; latency: {lat['timer']}; memory: {mem['kind']}", style="dim"))
    console.print(f"weights      {r['weights']['loaded']} tensors loaded through ckptstat's readers; outputs finite: "
                  f"{r['outputs_finite']}")
    for note in r["notes"]:
        console.print(Text("note: ").append_text(safe(note)), style="yellow")


def render_memory(r: dict, console: Console, seq_flag: str | None = "--seq", frames: bool = False) -> None:
    """The memory report and its planner verdict (render/memory.py, imported on use)."""
    from .memory import render_memory as render

    render(r, console, seq_flag, frames)
