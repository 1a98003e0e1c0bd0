"""`ckptstat ties`: the parameter count under every counting convention, itemised, and the config
cross-check, from the census's tie evidence (census.ties, whose docstring lists the evidence labels)."""
from __future__ import annotations

import math
from typing import Any

from ..census import aliases, parameters, placements
from ..census.quant import logical
from ..census.quant.mlx import channels_last, is_mlx_file, restacked
from ..census.resolution import resolve
from ..census.ties import Tie, declined_ties, find_ties, tie_word_embeddings
from ..core import Checkpoint
from ..families.framework.infer import canonical_name, canonical_tensors, tf_spelled
from ..families.framework.tensors import expected_tensors
from ..families.load_table import load_differences
from ..families.tie_table import class_ties
from ..families.wrappers import is_outside
from ..naming import normalize

TIES_SCHEMA = "ckptstat.ties/1"
_NO_RULES = ("no family rules were available for model_type {!r}: ties come only from the file itself "
             "(shared storage, safetensors metadata; --deep: identical contents) and from the ties of the "
             "config.json architectures class (docs/ties.md)")


def _torchinfo_total(params: dict[str, int], identity: dict[str, str], recursive: set[str]) -> int:
    """What torchinfo 1.8's summary(model) reports as Total params, simulated on the name tree.

    torchinfo gives each module the count of its own named_parameters() (deduplicated within that
    module only), adds leaf modules whole and, for every other module, its count minus what all its
    descendants account for (leaves whole, others by the same rule), clipped at 0; a module object met
    a second time is '(recursive)' and skipped (torchinfo/layer_info.py leftover_params and
    get_children_layers, which returns all descendants; model_statistics.py). So a weight tied across
    two modules counts twice, while BERT's decoder bias, a child's parameter that is also its parent's,
    counts once. TF names are normalised (`/` -> `.`) so that their scopes act as modules."""
    norm = {n: normalize(n) for n in params}
    identity = {norm[n]: norm.get(identity[n], normalize(identity[n])) for n in params}
    params = {norm[n]: v for n, v in params.items()}
    recursive = {normalize(m) for m in recursive}
    children: dict[str, set[str]] = {"": set()}
    direct: dict[str, set[str]] = {}
    for name in params:
        module = name.rpartition(".")[0]
        direct.setdefault(module, set()).add(identity[name])
        while module not in children:
            children[module] = set()
            parent = module.rpartition(".")[0]
            children.setdefault(parent, set())
            children[parent].add(module)
            module = parent
    # Bottom-up (deepest first): the identities under each module, its count, its contribution
    # (leaves whole; others their count minus what all descendants account for) and the sum of
    # its descendants' contributions.
    ids: dict[str, set[str]] = {}
    contribution: dict[str, int] = {}
    below: dict[str, int] = {}
    total = 0
    for m in sorted(children, key=lambda m: -(m.count(".") + (m != ""))):
        ids[m] = set(direct.get(m, ()))
        below[m] = 0
        for c in children[m]:
            ids[m] |= ids[c]
            below[m] += (0 if c in recursive else contribution[c]) + below[c]
        count = sum(params[i] for i in ids[m])
        contribution[m] = count if not children[m] else count - below[m]
        if m not in recursive:
            total += count if not children[m] else max(contribution[m], 0)
    return total


def counting(ckpt: Checkpoint, ties: list[Tie]) -> dict:
    place = placements(ckpt)
    tensors = ckpt.tensors
    is_param = {n for n, p in place.items() if p.role == "parameter"}
    tie_of = {t.alias: t for t in ties}
    # The model's parameter names: the file's, plus names absent because tied.
    absent = [t for t in ties if t.status == "absent from file" and t.target in is_param]
    names = {n: tensors[n].numel for n in tensors if n in is_param}
    names.update({t.alias: t.numel for t in absent})
    identity = {n: n for n in names}
    for t in sorted(ties, key=lambda t: t.alias):
        if t.alias in identity and t.target in names:   # a parameter over a buffer's storage still counts itself
            identity[t.alias] = identity.get(t.target, t.target)
    for n in identity:  # resolve chains (an alias of an alias)
        while identity[n] != identity.get(identity[n], identity[n]):
            identity[n] = identity[identity[n]]
    recursive = {t.alias.rpartition(".")[0] for t in ties if t.module}

    unique_ids = {identity[n] for n in names}
    unique = sum(names[i] for i in unique_ids)
    stored = sum(t.numel for t in parameters(ckpt))
    file_names = sum(tensors[n].numel for n in is_param)
    every = sum(names.values())
    torchinfo = _torchinfo_total(names, identity, recursive)

    def why(t: Tie) -> str:
        return f"tied to {t.target} ({t.evidence}; {t.status})"

    alias_rows: list[dict[str, Any]] = [{"name": t.alias, "elements": t.numel, "why": why(t)} for t in ties if t.alias in names]
    twice = [{"name": t.alias, "elements": t.numel, "why": why(t)} for t in ties if t.status == "stored twice"]
    in_file_aliases = [{"name": t.alias, "elements": t.numel, "why": why(t)} for t in ties
                       if t.alias in tensors and t.alias in is_param]
    torchinfo_extra = [r for r in alias_rows if not tie_of[r["name"]].module and not _same_subtree_bias(tie_of[r["name"]])]
    rest = torchinfo - unique - sum(r["elements"] for r in torchinfo_extra)
    if rest:
        torchinfo_extra.append({"name": "(module tree)", "elements": rest,
                                "why": "torchinfo's per-module leftover rule over shared modules"})
    non_params = [{"name": n, "elements": tensors[n].numel, "why": f"{place[n].role}, not a parameter"}
                  for n in tensors if n not in is_param]
    alias_of = aliases(ckpt)
    non_trainable: list[dict[str, Any]] = [{"name": n, "elements": tensors[n].numel,
                      "why": "Keras non-trainable variable (moving statistics, adapt() state, a frozen layer's "
                              "weights): count_params() counts it"}
                     for n in tensors if place[n].role == "non-trainable" and n not in alias_of]
    rows: list[dict[str, Any]] = [
        {"convention": "unique parameters", "equals": "parameters the file holds, each storage once, plus none for tied names",
         "params": unique, "differences": []},
        {"convention": "every name counted", "equals": "named_parameters(remove_duplicate=False)",
         "params": every, "differences": alias_rows},
        {"convention": "torchinfo 1.8 summary", "equals": "torchinfo.summary(model) Total params",
         "params": torchinfo, "differences": torchinfo_extra},
        {"convention": "stored parameter elements",
         "equals": "elements of the parameter tensors the file stores, each storage and view once",
         "params": stored, "differences": twice},
        {"convention": "file tensor list", "equals": "sum over every parameter name in the file (a naive state_dict loop)",
         "params": file_names, "differences": in_file_aliases},   # (a tie stored twice is one of them)
    ]
    if non_trainable:
        # Keras counts trainable + non-trainable weights (Model.count_params(); summary()'s "Total params"),
        # torch's parameters() leaves buffers out: BatchNormalization's moving_mean/moving_variance are
        # weights to Keras and running_mean/running_var buffers to torch. Both are right; they differ.
        rows.append({"convention": "Keras count_params()",
                     "equals": "model.count_params() = trainable + non-trainable weights (Keras counts BatchNormalization's "
                               "moving statistics; torch's parameters() leaves the equivalent running statistics out as buffers)",
                     "params": unique + sum(int(r["elements"]) for r in non_trainable), "differences": non_trainable})
    return {"rows": rows, "not_counted": non_params}


def _same_subtree_bias(t: Tie) -> bool:
    """A tie inside one head (decoder.bias = predictions.bias): the parent module's parameter is
    also its child's, so torchinfo's leftover rule counts it once."""
    parent = t.target.rpartition(".")[0]
    return t.alias.startswith(parent + ".")


def cross_check(ckpt: Checkpoint, ties: list[Tie], declined: frozenset[str] = frozenset()) -> dict:
    """The parameters the resolved model has (census.resolve: config.json, its head from the tensor
    names when the config names no architectures class), against the file's: missing (each with its
    explanation when a tie accounts for it), unexpected, and shape mismatches. A name that is an alias
    of another stored tensor is neither: it is counted once already."""
    r = resolve(ckpt)
    if not ckpt.config:
        return {"available": False, "reason": "no config.json"}
    if r.spec is None:
        return {"available": False, "reason": r.error or _NO_RULES.format(r.model_type)}
    if ckpt.metadata.get("h5.layout") == "keras3" or ckpt.format == "keras (zip)":   # KerasHub's, with a transformers config
        return {"available": False, "reason": "the file names its variables by Keras' HDF5 paths (layers/<layer>/vars/N), "
                                              "not by the model's parameter names: not compared name by name"}
    spec = r.spec
    expected = expected_tensors(spec)
    if expected is None:
        return {"available": False, "reason": f"no tensor template for {spec.model_type}"}
    place = placements(ckpt)
    alias_of = aliases(ckpt)
    params = {n: t for n, t in ckpt.tensors.items() if place[n].role == "parameter"}
    # TF files (google-research BERT, HF TF .h5) spell the names their own way and store Dense kernels
    # [in, out]: compared under transformers' PyTorch spelling and [out, in] shapes (canonical_tensors),
    # reported under the file's names.
    spelled = {canonical_name(n): n for n in params} if tf_spelled(params) else {}
    if spelled and len(spelled) == len(params):
        canon = canonical_tensors(params)
        params = {c: canon[c] for c in spelled if c in canon}
    else:
        spelled = {n: n for n in params}
    # The file may wrap every name (`module.`): find the prefix from one expected name it holds.
    outer = next((n[: -len(e)] for e in expected for n in params if n.endswith(e) and (n == e or n[-len(e) - 1] == ".")), "")
    expected = {outer + n: shape for n, shape in expected.items()}
    tie_of = {canonical_name(t.alias): t for t in ties} | {t.alias: t for t in ties}
    # a tie the file cannot show, both names absent (an optimizer file, a shard without the embeddings): the
    # model still holds one parameter for the two
    tied_cfg = tie_word_embeddings(ckpt)
    ruled = {outer + rule.alias: (outer + rule.target, "config tie_word_embeddings" if rule.when == "config"
                                  else "architecture") for rule in r.tie_rules if rule.when == "always" or tied_cfg}
    # a name the class config.json names ties to a stored one is that parameter, found as a tie or not: a torch.save of
    # transformers 5's model in memory spells it otherwise (GPT-NeoX's `lm_head`, saved as `embed_out`), over one storage
    own = class_ties(ckpt.config, ckpt.tensors)
    label = f"config.json architectures {own.cls}" if own else ""
    grouped = {n: (kept, label) for g in (own.groups if own else ())
               for kept in [next((m for m in g if m in params), None)] if kept for n in g}
    missing, lacking = [], {}
    for name, shape in expected.items():
        if name not in params:
            t = tie_of.get(name)
            target, evidence = (t.target, t.evidence) if t else ruled.get(name) or grouped.get(name, ("", ""))
            tied = bool(t) or name in grouped or (target in expected and target not in params)
            missing.append({"name": name, "shape": list(shape), "elements": math.prod(shape),
                            "why": f"tied to {target} ({evidence})" if tied else "not in the file"})
            if not tied:
                lacking[name] = tuple(shape)
    # a wrapper's towers outside the analytic model (ArchSpec.outside) are the model's, not unexpected
    extra = {spelled[n]: t for n, t in params.items()
             if n not in expected and spelled[n] not in alias_of and not is_outside(n, spec.outside)}
    # in a file mlx wrote, the modules mlx_lm restacked (MoE experts, MLA's kv_b_proj): the same elements under other
    # names, neither missing nor unexpected; and its conv1d weights, channels last (relaid), not mismatched
    mlx = is_mlx_file(ckpt.metadata)
    regroups = restacked(lacking, {n: tuple(t.shape) for n, t in extra.items()}) if mlx else []
    regrouped = {n for g in regroups for n in g["stacked"] + g["as"]}
    missing = [m for m in missing if m["name"] not in regrouped]
    unexpected = [{"name": n, "shape": list(t.shape), "elements": t.numel} for n, t in extra.items() if n not in regrouped]
    mismatched: list[dict[str, Any]] = []
    relaid: list[dict[str, Any]] = []
    for n, info in params.items():
        if n in expected and info.shape != expected[n]:
            (relaid if mlx and channels_last(info.shape, expected[n]) else mismatched).append(
                {"name": spelled[n], "file": list(info.shape), "config": list(expected[n])})
    # A weight the model ties (the architecture's rule, or the config's with the switch on) that the file keeps as
    # its own variable with no tie found: TFAlbertMLMHead's decoder_bias, which AlbertForMaskedLM ties to
    # predictions.bias.
    own_copy = []
    for rule in r.tie_rules:
        alias, target = outer + rule.alias, outer + rule.target
        if ((rule.when == "always" or tied_cfg) and not rule.module and alias in params and target in params
                and alias not in tie_of and alias not in declined   # (copies that differ: transformers keeps both)
                and spelled[alias] not in tie_of):
            own_copy.append({"name": spelled[alias], "elements": params[alias].numel, "tied_to": spelled[target]})
    return {"available": True, "head": spec.head, "architecture": spec.architecture, "model": r.label,
            "head_source": r.head_source, "expected": len(expected),
            "missing": missing, "unexpected": unexpected, "shape_mismatches": mismatched, "own_copies": own_copy,
            "restacked": regroups, "relaid": relaid}


def audit(ckpt: Checkpoint, deep: bool = False, chunk_bytes: int = 16 << 20) -> dict:
    ties = find_ties(ckpt, deep=deep, chunk_bytes=chunk_bytes)
    declined = declined_ties(ckpt)   # (of the stored tensors, before the logical view)
    ckpt = logical(ckpt)   # quantised weights by their logical shapes (census/quant/)
    check = cross_check(ckpt, ties, frozenset(t.alias for t in declined))
    table = counting(ckpt, ties)
    r = resolve(ckpt)
    # model.parameters() of the model the census resolved (the class it is labelled with): the file's
    # unique parameters, plus those the model has and the file lacks (untied), minus those it would not load.
    row = {"convention": f"model.parameters() of {r.label}", "model": r.label,
           "equals": f"sum(p.numel() for p in model.parameters()) of {r.label} (head from {r.head_source})",
           "params": table["rows"][0]["params"], "differences": []}
    if check["available"]:
        for m in check["missing"]:
            if m["why"] == "not in the file":
                row["differences"].append({"name": m["name"], "elements": m["elements"],
                                           "why": "the model has it; the file does not"})
        for u in check["unexpected"]:
            row["differences"].append({"name": u["name"], "elements": -u["elements"],
                                       "why": "in the file; the model has no such parameter"})
        for c in check["own_copies"]:
            row["differences"].append({"name": c["name"], "elements": -c["elements"],
                                       "why": f"in the file as its own variable; the model ties it to {c['tied_to']}"})
        for m in check["shape_mismatches"]:
            d = math.prod(m["config"]) - math.prod(m["file"])
            row["differences"].append({"name": m["name"], "elements": d,
                                       "why": f"shape {m['file']} in the file, {m['config']} per config"})
    listed = {d["name"] for d in row["differences"]}   # and what the class config.json names makes on load
    on_load = [d for d in load_differences(ckpt.config, ckpt.tensors)
               if d["name"] not in listed]
    row["differences"] += on_load
    if not check["available"]:
        but = ", but for what the class makes on load" if on_load else ""
        row["equals"] += f" (assumed equal to the file's{but}: {check['reason']})"
    row["params"] += sum(d["elements"] for d in row["differences"])
    table["rows"].insert(1, row)
    rules = {"family": r.family.name if r.family else None, "model_type": r.model_type, "head": r.head,
             "model": r.label, "head_source": r.head_source, "available": r.family is not None}
    if r.family is None:
        rules["note"] = _NO_RULES.format(r.model_type)
    return {
        "schema": TIES_SCHEMA,
        "path": ckpt.path,
        "format": ckpt.format,
        "config": ckpt.config_path,
        "tie_word_embeddings": tie_word_embeddings(ckpt),
        "deep": deep,
        "rules": rules,
        "ties": [t.__dict__ for t in ties],
        # ties the rules make whose two stored copies differ: transformers 5.25 does not tie them (census/ties.py)
        "declined": [{**t.__dict__, "why": DECLINED_WHY} for t in declined],
        "counting": table,
        "cross_check": check,
    }


DECLINED_WHY = ("both stored, with different values: transformers 5.25's from_pretrained does not tie them "
                "(_tied_params_are_equal), so its parameters() counts both")


def restacked_text(groups: list[dict[str, Any]]) -> str:
    """One line for the cross-check's restacked modules (census.quant.mlx.restacked)."""
    g = groups[0]
    return (f"{len(groups)} module(s) hold tensors as mlx_lm's sanitize restacks them (MoE experts stacked, MLA's "
            f"kv_b_proj as embed_q and unembed_out), the same elements as the tensors transformers names: e.g. "
            f"{g['module']}: {len(g['stacked'])} tensor(s) over {g['count']} {g['of']} for {len(g['as'])} "
            f"({g['elements']:,} elements); {sum(x['elements'] for x in groups):,} in all")


def relaid_text(relaid: list[dict[str, Any]]) -> str:
    """One line for the cross-check's conv1d weights in mlx's axis order (census.quant.mlx.channels_last)."""
    m = relaid[0]
    return (f"{len(relaid)} conv1d weight(s) as mlx keeps them, [out, kernel, in] for torch's [out, in, kernel]: e.g. "
            f"{m['name']} {m['file']} for {m['config']}")


def verdict(ckpt: Checkpoint) -> dict:
    """The summary's tie line and its data (headers and config only)."""
    ties = find_ties(ckpt)
    evidence = sorted({t.evidence for t in ties})
    twice = [t for t in ties if t.status == "stored twice"]
    again = f", {len(twice)} stored twice ({sum(t.numel for t in twice):,} elements stored again)" if twice else ""
    text = (f"{len(ties)} tied name(s) counted once ({', '.join(evidence)}){again}: see `ckptstat ties`" if ties
            else "none found in headers or config (`ckptstat ties --deep` compares contents)")
    if declined := declined_ties(ckpt):
        text += (f"; {len(declined)} tie(s) the config asks for stored twice with different values, not tied by "
                 f"transformers 5.25 and counted twice ({', '.join(t.alias for t in declined[:3])})")
    return {"count": len(ties), "text": text,
            "pairs": [{"alias": t.alias, "target": t.target, "evidence": t.evidence, "status": t.status} for t in ties]}
