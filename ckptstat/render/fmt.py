"""What every renderer shares: human-readable numbers and sizes, the table style, the lines that say
which model and which sequence length a figure assumed. Imported by the package and its renderers alike
(a renderer never imports the package: render/__init__ imports renderers)."""
from __future__ import annotations

import json

from rich import box
from rich.table import Table
from rich.text import Text

from .names import safe

# What summary, flops and memory assume when no --seq is given (families.framework.spec.default_seq).
DEFAULT_SEQ_RULE = "128, or the model's learned positions if fewer"
FRAMES_RULE = "2 x max_source_positions"   # Whisper (families/framework/spec.py audio_inputs)

MODULE_LINES = 80   # the module tree of an unknown model, printed up to this many lines


def human(n: float, unit: str = "") -> str:
    for suffix in ("", "K", "M", "B", "T"):
        if abs(n) < 1000 or suffix == "T":
            return f"{n:.0f}{unit}" if suffix == "" else f"{n:.2f}{suffix}{unit}"
        n /= 1000
    return str(n)


def human_bytes(n: float, compact: bool = False) -> str:
    """1.5 MiB; compact (for narrow columns): 1.5M, binary units all the same."""
    for suffix in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or suffix == "TiB":
            if compact:
                # 3 significant digits, but whole from 100 on: '.3g' writes 1000 as '1e+03'
                return f"{n:.0f}" if suffix == "B" else f"{n:.0f}{suffix[0]}" if abs(n) >= 99.95 else f"{n:.3g}{suffix[0]}"
            return f"{n:.0f} {suffix}" if suffix == "B" else f"{n:.1f} {suffix}"
        n /= 1024
    return str(n)


def seq_source(flag: str | None, frames: bool = False) -> str:
    """Why an analytic figure assumed its sequence length: the `flag` that set it, or (None) the default's
    rule, mel frames' for an audio encoder."""
    return flag or "default: " + (FRAMES_RULE if frames else DEFAULT_SEQ_RULE)


def seq_line(seq: int | list[int], flag: str | None, frames: bool = False) -> Text:
    """`seq          128 (default: ...)`: the sequence length an analytic figure assumed, and why; `frames`: an
    audio encoder's input, in mel frames."""
    seqs = ", ".join(map(str, seq if isinstance(seq, list) else [seq])) + (" mel frames" if frames else "")
    return Text("seq          " + seqs).append(f" ({seq_source(flag, frames)})", style="dim")


def image_text(part: dict) -> str | None:
    """`16x16 image` for a report (or its analytic part) of a model that reads images alone (`input`: "image",
    families/framework/spec.py `image_fields`): its figures are per image, its seq unused; None for any other."""
    return f"{part['image_size']}x{part['image_size']} image" if part.get("input") == "image" else None


def one_image(im: dict, flops: str) -> str:
    """The summary's line on one image of a wrapper whose image path is modelled (analytic.image, a side given): its
    tokens in the sequence (and Llama 3.2 Vision's states for the cross-attention layers) and the tower's FLOPs
    (`flops`, as the caller writes numbers)."""
    states = f" and {im['states']:,} states its cross-attention layers read" if im.get("states") else ""
    return (f"one {im['side']}x{im['side']} image: {im['tokens']:,} token{'s' if im['tokens'] != 1 else ''}{states}, "
            f"{flops} FLOPs through the vision tower and projector")


def input_line(r: dict, seq: int | list[int], flag: str | None, frames: bool = False) -> Text:
    """`seq_line`, or for an image model's report the image its figures are per: no sequence length enters them."""
    image = image_text(r)
    if image:
        return Text(f"input        one {image}").append(" (figures per image; no sequence length)", style="dim")
    return seq_line(seq, flag, frames)


def single_file_text(one: dict) -> str:
    """What a diffusion pipeline saved as one file is (summary/1's `single_file`), for the text and the reports."""
    where = f" (diffusers reads it with {one['pipeline']}'s config)" if one.get("pipeline") else ""
    return one["what"] + (f", diffusers' model type {one['model_type']!r}{where}" if one["model_type"] else "")


# families no rule places by name: the module tree shows their tensors instead of a list of unplaced names
UNPLACED_FAMILIES = ("unknown", "diffusers")
COMPONENTS_TITLE = "Components (as diffusers' from_single_file splits the file)"
LORA_TITLE = "Adapted modules (a LoRA file)"


def counts_text(counts: dict) -> str:
    """`{"8": 120, "4": 2}` as `8 x 120, 4 x 2`: a value and how many modules have it."""
    return ", ".join(f"{k} x {v}" for k, v in counts.items())


def lora_file_text(lora: dict) -> str:
    """A LoRA file (any naming), in a line: its modules, DoRA, and sd-scripts' own record of its training if kept."""
    t = lora["training"]
    said = [f"{label} {t[k]}" for k, label in (("ss_network_module", "network"), ("ss_network_dim", "dim"),
                                                ("ss_network_alpha", "alpha"), ("ss_base_model_version", "base"),
                                                ("ss_steps", "steps")) if k in t]
    return (f"a LoRA file ({lora['naming']} naming), {lora['modules']} adapted modules" + (", DoRA" if lora["dora"] else "")
            + (f"; sd-scripts says: {', '.join(said)}" if said else "") + "; not a whole model")


def object_text(o: dict, width: int = 80) -> str:
    """A row of `objects` as a line or a report's cell shows it: its value's JSON, cut to `width`, or why it is not
    read."""
    return json.dumps(o["value"])[:width] if "value" in o else f"not read: {o.get('unread')}"


def value_cell(v: object, width: int) -> str:
    """One side's or one step's non-tensor value in diff's and trend's tables: its JSON, cut; "-" where it has none."""
    return "-" if v is None else json.dumps(v)[:width]


def layer_label(x: dict) -> str:
    """A layer row's name, its stack (bucket) and its index: `encoder.1` (diff's and trend's layer rows)."""
    return f"{x['bucket']}.{x['layer']}"


def table(title: str, *columns: str) -> Table:
    t = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left", pad_edge=False)
    for i, c in enumerate(columns):
        t.add_column(c, justify="left" if i == 0 else "right", overflow="fold")
    return t


def arch_line(r: dict) -> Text:
    a = r["architecture"]
    head = a.get("architecture") or a["head"]
    kind = a["family"] + (f" ({a['model_type']})" if a["model_type"] != a["family"] else "")
    t = Text("model        ").append_text(safe(f"{kind} {head}"))
    return t
