"""`ckptstat PATH` and `ckptstat tensors`: the summary and tensor-list reports of a census.
Headers (and config) only. Schemas are versioned by the "schema" key; fields are only added within
one version."""
from __future__ import annotations

import os
from typing import Any

from ..census import aliases, architecture, name_matches, placements, resolve
from ..census.counts import diffusion_layout, lora_naming
from ..census.diffusion import NOT_LOADED, OTHER, SCHEDULE_COMPONENT, component, pipeline
from ..census.lora_file import COMPONENTS as LORA_COMPONENTS
from ..census.lora_file import PARTS as LORA_PARTS
from ..census.lora_file import modules as lora_modules
from ..census.model import Model, from_checkpoint
from ..census.quant import bits_per_weight, logical
from ..census.tally import optimizer_state, tally
from ..census.ties import structural_tie_notes
from ..core import Checkpoint
from ..core.files import file_size
from ..errors import CkptstatError, UsageError
from ..families.framework.spec import audio_inputs, check_seq, default_seq, image_fields
from ..families.images import any_size
from ..families.load_table import load_differences
from ..naming import BUCKETS, ROLES
from .flops import image_rows, run, wrapper_images
from .optimizer_names import optimizer_names
from .quantized import member_fields, quantization
from .ties import verdict

SUMMARY_SCHEMA = "ckptstat.summary/1"
TENSORS_SCHEMA = "ckptstat.tensors/1"
COUNTING_RULE = ("unique parameters: tensors whose role is 'parameter', each storage and view counted once "
                 "(a tied weight stored under two names counts once)")


def summarize(ckpt: Checkpoint, seq: int | None = None) -> dict:
    """The `summary` report; `seq` the length of its analytic FLOPs line (None: the default `flops` takes)."""
    original, ckpt = ckpt, logical(ckpt)   # quantised weights as their logical tensors (census/quant/)
    alias_of = aliases(ckpt)
    c = tally(ckpt)   # the census's one pass over the tensors (census/tally.py)
    total = c.total
    row = lambda s: {"params": s[0], "bytes": s[1], "tensors": s[2]}  # noqa: E731
    buckets = {b: row(s) for b, s in c.buckets.items()}
    sizes = {f: file_size(f) for f in ckpt.files}   # (a URL's size is known from its first range request)
    files = [{"path": f, "bytes": n} for f, n in sizes.items()]
    file_bytes = sum(sizes.values())
    held = optimizer_state(ckpt)
    loaded = on_load(ckpt, total)   # (the class's count on load: the summary's line, and what the recorded count faces)
    share = lambda n: (n / total) if total else 0.0
    return {
        "schema": SUMMARY_SCHEMA,
        "path": ckpt.path,
        "format": ckpt.format,
        "files": files,
        "config": ckpt.config_path or ckpt.config_from,
        "architecture": architecture(ckpt),
        "resolved": _resolved(ckpt),
        "counting": COUNTING_RULE,
        "parameters": {
            "unique": total,
            "tensors": sum(r["tensors"] for r in buckets.values()),
            "aliases": [{"name": a, "same_as": b} for a, b in alias_of.items()],
            "stored_bytes": sum(r["bytes"] for r in buckets.values()),
            "bits_per_weight": bits_per_weight(sum(r["bytes"] for r in buckets.values()), total),
            "partial": original.partial,   # why every total here is partial (a GGUF split set missing shards), else None
            "on_load": loaded,
            "recorded": recorded(original, loaded["params"] if loaded else total),
        },
        "buckets": [{"bucket": b, **buckets[b], "share": share(buckets[b]["params"]),
                     "bits_per_weight": bits_per_weight(buckets[b]["bytes"], buckets[b]["params"])}
                    for b in BUCKETS if b in buckets],
        "quantization": quantization(original),
        "layers": [{"bucket": b, "layer": i, **row(c.layers[(b, i)])} for b, i in sorted(c.layers)],
        "dtypes": [{"dtype": d, **row(s)} for d, s in sorted(c.by_dtype.items(), key=lambda kv: -kv[1][1])],
        "non_parameters": [{**c.non_params[r], "names": list(c.non_params[r]["names"])} for r in ROLES if r in c.non_params],
        "unplaced": list(c.unplaced),
        "storage": {"file_bytes": file_bytes, "tensor_bytes": c.tensor_bytes,
                    "overhead_bytes": file_bytes - c.tensor_bytes},
        "metadata": dict(ckpt.metadata),
        "gguf": _gguf_facts(ckpt) if ckpt.format == "gguf" else None,   # the useful part of metadata, labelled
        # a training library's step, lr (formats/training.py); which parameter each optimizer state belongs to
        "training": {**ckpt.training, "optimizer_mapping": optimizer_names(ckpt, build=False)[1]} if ckpt.training else None,
        # what the optimizer state holds ({entries, tensors, elements, bytes}), else None; `model_weights` false for a
        # file of optimizer state alone (a Trainer's optimizer.pt): no model figures then (docs/training.md)
        "optimizer_state": held,
        "model_weights": bool(total),
        "objects": {k: dict(v) for k, v in ckpt.objects.items()},     # non-tensor items stored beside (formats/dcp/objects.py)
        "notes": list(ckpt.notes) + structural_tie_notes(ckpt),
        "single_file": single_file(ckpt),   # a diffusion pipeline in one file: its components, else None
        "lora_file": lora_file_report(ckpt),   # a LoRA file without a PEFT config: its modules and ranks, else None
        "ties": verdict(ckpt),
        "analytic": None if held and not total else summary_fields(ckpt, seq),
        "modules": module_tree(c.tree),
    }


SINGLE_FILE_COUNTING = ("per component: the unique parameters under its prefix, the tensors diffusers' from_single_file "
                        "loads each model from (model.diffusion_model. the UNet or transformer, first_stage_model. / "
                        "vae. the VAE, cond_stage_model. / conditioner.embedders.N. / text_encoders.* the text "
                        "encoders; a bare FLUX.1 file is its transformer); the UNet's EMA copy (model_ema.) and the "
                        "noise schedule are buffers, counted apart")


def single_file(ckpt: Checkpoint) -> dict | None:
    """A diffusion pipeline saved as one file (census/diffusion.py): which model diffusers reads it as, and
    its tensors by component; None for any other checkpoint."""
    one = diffusion_layout(ckpt)
    if one is None:
        return None
    place, alias_of = placements(ckpt), aliases(ckpt)
    order = [*dict.fromkeys([*(part for _, part in one.parts), one.rest, NOT_LOADED, SCHEDULE_COMPONENT, OTHER])]
    rows: dict[str, dict[str, Any]] = {part: {"component": part, "params": 0, "bytes": 0, "tensors": 0, "buffers": 0}
                                       for part in order}
    for name, t in ckpt.tensors.items():
        if name in alias_of:
            continue
        r = rows[component(name, one)]
        r["tensors"] += 1
        r["bytes"] += t.nbytes
        if place[name].role == "parameter":
            r["params"] += t.numel
        else:
            r["buffers"] += 1
    return {"what": one.what, "model_type": one.model_type, "pipeline": pipeline(one.model_type),
            "counting": SINGLE_FILE_COUNTING, "components": [r for r in rows.values() if r["tensors"]]}


LORA_FILE_COUNTING = ("per part: the adapted modules, their network's tensors (lora_down / lora_A, lora_up / lora_B, "
                      "hada_*, lokr_*, dora_scale / lora_magnitude_vector: trainable parameters) and ranks from the "
                      "shapes; each module's alpha is a buffer, counted apart (scale alpha / rank)")


def lora_file_report(ckpt: Checkpoint) -> dict | None:
    """A LoRA saved as one file without a PEFT config (census/lora_file.py): its modules by part, networks and ranks;
    None for any other checkpoint."""
    how = lora_naming(ckpt)
    if how is None:
        return None
    place = placements(ckpt)
    found = lora_modules(ckpt.tensors, lambda n: tuple(ckpt.tensors[n].shape), how)
    parts: dict[str, dict[str, Any]] = {}
    for m in found.values():
        row = parts.setdefault(m.part, {"part": m.part, "modules": 0, "params": 0, "ranks": {}, "networks": {}})
        row["modules"] += 1
        row["params"] += sum(ckpt.tensors[n].numel for n in m.names if place[n].role == "parameter")
        rank = "-" if m.rank is None else str(m.rank)
        row["ranks"][rank] = row["ranks"].get(rank, 0) + 1
        row["networks"][m.network] = row["networks"].get(m.network, 0) + 1
    order = [*dict.fromkeys([*(part for _, part in LORA_PARTS), *LORA_COMPONENTS, "model"])]
    return {"naming": how, "modules": len(found), "dora": any(m.network == "DoRA" for m in found.values()),
            "counting": LORA_FILE_COUNTING, "parts": sorted(parts.values(), key=lambda p: order.index(p["part"])),
            "training": {k: v for k, v in ckpt.metadata.items() if k in TRAINING_KEYS}}


# sd-scripts' training metadata (train_network.py: `ss_*` in the safetensors header) worth a line
TRAINING_KEYS = ("ss_network_module", "ss_network_dim", "ss_network_alpha", "ss_base_model_version",
                 "ss_sd_model_name", "ss_resolution", "ss_num_train_images", "ss_num_epochs", "ss_steps",
                 "ss_learning_rate", "ss_output_name")


def on_load(ckpt: Checkpoint, total: int) -> dict | None:
    """`model.parameters()` of the class config.json names, where the class holds parameters the file does not
    (recreated on load) or in another size (a converter's padding): the file's unique count, itemised to it
    (families/load_table.py); None where the two are equal. `unique` stays the file's."""
    diffs = load_differences(ckpt.config, ckpt.tensors)
    if not diffs:
        return None
    return {"params": total + sum(d["elements"] for d in diffs), "differences": diffs,
            "convention": "model.parameters() of the class config.json names, built from this file: the unique "
                          "parameters plus those it recreates on load, less rows it drops"}


def recorded(ckpt: Checkpoint, expected: int) -> dict | None:
    """The count transformers 5 recorded when it saved the shards (the index's metadata `total_parameters`:
    `model.num_parameters()`, the model's parameters() each once) beside `expected`, the one it should equal:
    model.parameters() of the class on load where that differs from the file's (on_load), else the file's unique
    count; None without."""
    found = ckpt.metadata.get("index.total_parameters")
    if found is None:
        return None
    return {"count": int(found), "expected": expected, "difference": int(found) - expected,
            "by": "the index's metadata total_parameters: transformers' model.num_parameters() when it saved the shards"}


def _gguf_facts(ckpt: Checkpoint) -> dict[str, str]:
    from ..formats.gguf_meta import facts  # GGUF's reader, loaded for GGUF files only (the quick path's imports)

    return facts(ckpt.metadata)


# Module depth the tree keeps: real models nest < 20 deep; the tree is built and rendered recursively.
MAX_TREE_DEPTH = 64


def module_tree(params: tuple[list[str], list[int], list[int]]) -> list[dict]:
    """Parameters (columns: names, elements, stored bytes) grouped by module prefix: nodes {name, params, bytes,
    tensors, repeat, children}, a total per node. Numbered siblings of one structure collapse into one node
    (`layers.{0..31}`, repeat 32: totals over all, children of the first), and a chain of single children joins
    into one name."""
    return _Structures().tree(params)


class _Structures:
    """The module tree, made in one pass over the names in their order, holding only the modules on the current
    name's path open (issue 35: a node a module was the summary's peak, 365k nodes at 1M tensors). A module that
    the names leave is closed into its structure number (its own sums and its children's names and numbers: equal
    structures, equal numbers), which its parent keeps under its name; a module the names come back to (a second
    dtype's run, another shard) is reopened from its number, which holds all it was."""

    def __init__(self) -> None:
        self.numbers: dict[tuple, int] = {}   # structure key -> number
        # number -> (own sums, children's (name, number) in the order the first module of that structure had them)
        self.structures: list[tuple[tuple[int, int, int], tuple[tuple[str, int], ...]]] = []
        self.totals: list[tuple[int, int, int]] = []   # number -> elements, bytes, tensors of the whole subtree

    def tree(self, params: tuple[list[str], list[int], list[int]]) -> list[dict]:
        # An open module is a list: [children: name -> structure number (-1 while open), own elements, bytes, tensors]
        path: list[list] = [[{}, 0, 0, 0]]   # the root, then the open modules of the current prefix
        parts: list[str] = []
        last, node = None, path[0]
        for name, numel, size in zip(*params):
            prefix = name.rpartition(".")[0] if "." in name else name
            if prefix != last:   # (consecutive names of one module: most of a header's)
                last = prefix
                new = prefix.split(".", MAX_TREE_DEPTH)[:MAX_TREE_DEPTH]   # a name of 5,000 parts sits at depth 64
                same = 0
                for a, b in zip(parts, new):
                    if a != b:
                        break
                    same += 1
                while len(parts) > same:
                    self._close(path, parts)
                for part in new[same:]:
                    kids = path[-1][0]
                    number = kids.get(part)
                    if number is None:
                        opened: list = [{}, 0, 0, 0]
                    else:
                        own, children = self.structures[number]
                        opened = [dict(children), *own]
                    kids[part] = -1
                    path.append(opened)
                    parts.append(part)
                node = path[-1]
            node[1] += numel
            node[2] += size
            node[3] += 1
        while parts:
            self._close(path, parts)
        return self._collapse(path[0][0])

    def _close(self, path: list[list], parts: list[str]) -> None:
        """The innermost open module closed into its structure number, kept by its parent under its name."""
        kids, n, b, t = path.pop()
        own = (n, b, t)
        key: tuple = ((own, tuple(sorted(kids.items()))) if kids else own)
        number = self.numbers.get(key)
        if number is None:
            number = self.numbers[key] = len(self.structures)
            self.structures.append((own, tuple(kids.items())))
            for child in kids.values():
                c = self.totals[child]
                n, b, t = n + c[0], b + c[1], t + c[2]
            self.totals.append((n, b, t))
        path[-1][0][parts.pop()] = number

    def _collapse(self, children: dict[str, int]) -> list[dict]:
        out: list[dict] = []
        numbered: dict[int, list[int]] = {}
        for key, number in children.items():
            if key.isascii() and key.isdigit() and len(key) <= 18:   # (not "²", which int() refuses, nor 5,000 digits)
                numbered.setdefault(number, []).append(int(key))
            else:
                out.append(self._node(key, number, 1))
        for number, idx in numbered.items():
            idx.sort()
            out.append(self._node(str(idx[0]) if len(idx) == 1 else _span(idx), number, len(idx)))
        return out

    def _node(self, name: str, number: int, repeat: int) -> dict:
        (_, _, own), children = self.structures[number]
        total = [x * repeat for x in self.totals[number]]   # (numbered siblings collapse when their structures are equal)
        kids = self._collapse(dict(children))
        while repeat == 1 and not own and len(kids) == 1:
            # a chain of single children reads as one name: model.decoder.layers.{0..31}
            k = kids[0]
            name, repeat, own, kids = f"{name}.{k['name']}", k["repeat"], k["own_tensors"], k["children"]
        return {"name": name, "params": total[0], "bytes": total[1], "tensors": total[2], "repeat": repeat,
                "own_tensors": own, "children": kids}


def _span(idx: list[int]) -> str:
    return f"{{{idx[0]}..{idx[-1]}}}" if idx == list(range(idx[0], idx[-1] + 1)) else "{" + ",".join(map(str, idx)) + "}"


def _resolved(ckpt: Checkpoint) -> dict:
    """The census's head resolution (census.resolve), the one `ckptstat ties` and the analytic block use."""
    r = resolve(ckpt)
    return {"family": r.family.name if r.family else None, "head": r.head, "model": r.label, "head_source": r.head_source}


def tensors(ckpt: Checkpoint, pattern: str | None = None) -> dict:
    """Every tensor, optionally filtered by a glob (`*attention*`) or substring on its name."""
    place = placements(ckpt)
    alias_of = aliases(ckpt)
    quant = member_fields(ckpt)   # pieces of quantised weights: the logical weight and its shape (census/quant/)
    rows = []
    for t in ckpt:
        if not name_matches(t.name, pattern):
            continue
        p = place[t.name]
        rows.append({
            "name": t.name, "bucket": p.bucket, "layer": p.layer, "role": p.role, "dtype": t.dtype,
            "shape": list(t.shape), "numel": t.numel, "bytes": t.byte_size,
            # stored bits per logical element: 4.5 for GGUF Q4_0 (18-byte blocks of 32), 16 for F16
            "bits_per_weight": 8 * t.byte_size / t.numel if t.numel else None,
            "alias_of": alias_of.get(t.name), "file": os.path.basename(t.file), **quant.get(t.name, {}),
        })
    return {"schema": TENSORS_SCHEMA, "path": ckpt.path, "format": ckpt.format, "filter": pattern, "tensors": rows}


def summary_fields(ckpt: Checkpoint, seq: int | None = None) -> dict | None:
    """The summary's small analytic block: forward FLOPs per token at `seq` (None: the default sequence
    length flops and memory use; `summary --seq` and `report --seq` pass their own) and weight memory. None when
    the family is unknown; an error becomes a note, but for a `seq` the model cannot run (the caller's usage
    error, as on `flops`)."""
    if architecture(ckpt)["family"] == "unknown":
        return None
    bad_seq: UsageError | None = None
    try:
        m = from_checkpoint(ckpt)
        # audio models: the encoder's mel frames and a decoder length (never None), as `flops`
        lengths, dec_seq = audio_inputs(m.spec, [seq] if seq else [], None)
        n = lengths[0] if lengths else default_seq(m.spec)
        if seq is not None:
            try:
                check_seq(m.spec, n, dec_seq)
            except UsageError as e:
                bad_seq = e
                raise
        t = run(m, 1, n, dec_seq)["totals"]
        image = image_fields(m.spec)   # an image model's figure is per image: its FLOPs do not depend on seq
        per = t["flops"] if image else t["flops_per_token"]
        return {"family": m.spec.family, "head": m.spec.architecture or m.spec.head, "seq": n,
                "input": image.get("input") or ("tokens" if dec_seq is None else "mel frames"), "dec_seq": dec_seq,
                "image_size": m.spec.image_size or None,
                "flops_per_token": per, "training_flops_per_token": 3 * per,
                "predicted_params": m.predicted["total"], "agree": m.agree, "outside_params": m.outside_params,
                "outside_modules": list(m.outside_modules), "image": _one_image(m),
                "active_params": m.predicted.get("active"),
                "weight_bytes": m.weight_bytes, "weight_bytes_bf16": 2 * m.params, "notes": list(m.notes)}
    except Exception as e:   # the summary must never fail because of the analytic model
        if bad_seq is not None:
            raise bad_seq from None
        return {"error": str(e) if isinstance(e, CkptstatError) else f"{type(e).__name__}: {e}"}


def _one_image(m: Model) -> dict | None:
    """A vision-language wrapper whose image path ckptstat models (families/images/): one image's side, tokens and
    FLOPs through the tower and projector (side None: a tower that reads any size, which `flops --images N
    --image-size S` sizes); None for any other model."""
    if m.image_config is None:
        return None
    if any_size(m.image_config):   # (no one figure)
        return {"side": None}
    try:
        path = wrapper_images(m, 1)
    except UsageError:   # (a config whose image path does not add up: `flops --images` says why)
        return None
    assert path is not None
    out = {"side": path.side, "tokens": path.tokens, "flops": sum(r["flops"] for r in image_rows(m, path, 1))}
    return out | ({"states": path.cross} if path.cross else {})


def bert_stat(ckpt: Checkpoint, batch: int, seq: int) -> dict:
    """Bertstat's report for its users: the summary plus FLOPs at Bertstat's input_size (batch, seq)
    (docs/flops_memory.md): matmul FLOPs, 2 per MAC, as FlopCounterMode counts."""
    from ..families.framework.spec import check_seq

    r = summarize(ckpt)
    r["input_size"] = {"batch": batch, "seq": seq}
    if r.get("analytic") and "error" not in r["analytic"]:
        model = from_checkpoint(ckpt)
        check_seq(model.spec, seq)  # a length the model cannot run is a usage error, as on the CLI
        totals = run(model, batch, seq)["totals"]
        r["flops"] = {"batch": batch, "seq": seq, "flops": totals["flops"], "macs": totals["macs"],
                      "training_flops": totals["training_flops"], "elementwise_flops": totals["elementwise_flops"],
                      "rule": "matmul FLOPs = 2 x MACs (torch FlopCounterMode); training = 3 x forward"}
        r.setdefault("extra_lines", []).append(
            f"input_size   ({batch}, {seq}): forward {totals['flops']:,} FLOPs = {totals['macs']:,} MACs "
            f"(matmul, 2 per MAC); training x3")
    return r
