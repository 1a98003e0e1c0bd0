"""Tied weights and counting conventions: why tools report different parameter counts for one model.

Evidence for a tie, each labelled in the output:
  shared storage        two names over one storage and view (PyTorch files)
  safetensors metadata  `__metadata__[dropped] = kept`, as safetensors.torch.save_model records it
  config                the architecture ties the pair when `tie_word_embeddings` is true (and the
                        file lacks the alias, or stores it twice)
  architecture          a pair tied whatever the config says (BERT's decoder bias is the head's bias)
  structural            a head stored without its weight (TF1 BERT's MLM head stores only a bias)
  identical contents    `--deep`: streamed hashes of two stored tensors are equal
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

from .classify import normalize, strip_prefixes, structural_ties
from .report import aliases, parameters, placements
from .tensor import Checkpoint

TIES_SCHEMA = "ckptstat.ties/1"


@dataclass(frozen=True)
class TieRule:
    alias: str      # the name that is the same tensor as `target`, as its model names it
    target: str
    when: str       # "config": only if tie_word_embeddings; "always": the architecture ties it
    module: bool = False  # the whole module is shared (T5's embed_tokens is `shared`), not only a weight


# Known tied pairs, per family (from each transformers model's _tied_weights_keys).
TIE_RULES = [
    TieRule("cls.predictions.decoder.weight", "bert.embeddings.word_embeddings.weight", "config"),   # BERT
    TieRule("cls.predictions.decoder.bias", "cls.predictions.bias", "always"),
    TieRule("lm_head.decoder.weight", "roberta.embeddings.word_embeddings.weight", "config"),        # RoBERTa
    TieRule("lm_head.decoder.weight", "camembert.embeddings.word_embeddings.weight", "config"),
    TieRule("lm_head.decoder.bias", "lm_head.bias", "always"),
    TieRule("predictions.decoder.weight", "albert.embeddings.word_embeddings.weight", "config"),     # ALBERT
    TieRule("predictions.decoder.bias", "predictions.bias", "always"),
    TieRule("vocab_projector.weight", "distilbert.embeddings.word_embeddings.weight", "config"),     # DistilBERT
    TieRule("generator_lm_head.weight", "electra.embeddings.word_embeddings.weight", "config"),      # ELECTRA
    TieRule("lm_head.weight", "transformer.wte.weight", "config"),                                  # GPT-2
    TieRule("lm_head.weight", "model.embed_tokens.weight", "config"),                               # LLaMA, Mistral, Qwen2
    TieRule("encoder.embed_tokens.weight", "shared.weight", "always", module=True),                 # T5
    TieRule("decoder.embed_tokens.weight", "shared.weight", "always", module=True),
    TieRule("lm_head.weight", "shared.weight", "config"),
]
# transformers' default for tie_word_embeddings is True except where a family's config sets False.
UNTIED_BY_DEFAULT = {"llama", "mistral", "qwen2", "mixtral"}


@dataclass(frozen=True)
class Tie:
    alias: str
    target: str
    evidence: str    # one of the labels in the module docstring
    status: str      # "aliased in file" | "absent from file" | "stored twice"
    numel: int
    module: bool = False


def _tie_word_embeddings(ckpt: Checkpoint) -> bool | None:
    cfg = ckpt.config
    if not cfg:
        return None
    if "tie_word_embeddings" in cfg:
        return bool(cfg["tie_word_embeddings"])
    return cfg.get("model_type") not in UNTIED_BY_DEFAULT


def _has_head(ckpt: Checkpoint, outer: str, rule: TieRule) -> bool:
    from .arch.spec import HEAD_SUFFIXES

    lm_heads = tuple(suffix for suffix, head in HEAD_SUFFIXES if head in ("mlm", "lm", "pretraining"))
    archs = (ckpt.config or {}).get("architectures") or []
    if any(isinstance(a, str) and a.endswith(lm_heads) for a in archs):
        return True
    head = outer + rule.alias.rsplit(".", 2)[0] + "."
    return any(n.startswith(head) for n in ckpt.tensors)


def find_ties(ckpt: Checkpoint, deep: bool = False, chunk_bytes: int = 16 << 20) -> list[Tie]:
    """Every tie the evidence supports; each alias appears once, with its strongest evidence."""
    ties: dict[str, Tie] = {}
    tensors = ckpt.tensors

    def add(tie: Tie) -> None:
        ties.setdefault(tie.alias, tie)

    for alias, target in aliases(ckpt).items():
        add(Tie(alias, target, "shared storage", "aliased in file", tensors[alias].numel))
    # Only safetensors' __metadata__ records dropped -> kept; other formats' metadata (GGUF keys,
    # torch training scalars) may hold a tensor name as a value by chance.
    st_metadata = ckpt.metadata if ckpt.format.startswith("safetensors") else {}
    for dropped, kept in st_metadata.items():
        if dropped not in tensors and kept in tensors:
            add(Tie(dropped, kept, "safetensors metadata", "absent from file", tensors[kept].numel))
    tied_cfg = _tie_word_embeddings(ckpt)
    for rule in TIE_RULES:
        for name in tensors:
            if not name.endswith(rule.target) or (len(name) > len(rule.target) and name[-len(rule.target) - 1] != "."):
                continue
            outer = name[: len(name) - len(rule.target)]
            alias = outer + rule.alias
            if rule.when == "config" and not tied_cfg:
                continue
            label = "config tie_word_embeddings" if rule.when == "config" else "architecture"
            if alias not in tensors:
                if _has_head(ckpt, outer, rule):
                    add(Tie(alias, name, label, "absent from file", tensors[name].numel, rule.module))
            elif alias not in ties and tensors[alias].shape == tensors[name].shape:
                add(Tie(alias, name, label, "stored twice", tensors[name].numel, rule.module))
    for absent, target, _ in structural_ties(tensors):
        add(Tie(absent, target, "structural", "absent from file", tensors[target].numel))
    if deep:
        for a, b in identical_tensors(ckpt, chunk_bytes):
            if a not in ties and b not in ties:
                add(Tie(b, a, "identical contents", "stored twice", tensors[b].numel))
    return list(ties.values())


def identical_tensors(ckpt: Checkpoint, chunk_bytes: int = 16 << 20) -> list[tuple[str, str]]:
    """Pairs (first, duplicate) of distinct stored tensors with equal dtype, shape and contents,
    found by streaming a hash of each candidate in chunks. Constant tensors (all zeros, all ones)
    are left out: equal by initialisation, they say nothing about tying."""
    first_of = aliases(ckpt)
    groups: dict[tuple, list[str]] = {}
    for t in ckpt:
        if t.name not in first_of and t.numel > 1 and t.dt.kind != "str":
            groups.setdefault((t.dtype, t.shape), []).append(t.name)
    out = []
    for names in groups.values():
        if len(names) < 2:
            continue
        seen: dict[bytes, str] = {}
        for name in names:
            h = hashlib.blake2b(digest_size=20)
            lo = hi = None
            for chunk in ckpt.iter_chunks(name, chunk_bytes):
                h.update(chunk.tobytes())
                cmin, cmax = chunk.min(), chunk.max()
                lo = cmin if lo is None else min(lo, cmin)
                hi = cmax if hi is None else max(hi, cmax)
            if lo == hi:
                continue
            digest = h.digest()
            if digest in seen:
                out.append((seen[digest], name))
            else:
                seen[digest] = name
    return out


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
        if t.alias in identity:
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

    alias_rows = [{"name": t.alias, "elements": t.numel, "why": why(t)} for t in ties if t.alias in names]
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
    rows = [
        {"convention": "unique parameters", "equals": "parameters the file holds, each storage once, plus none for tied names",
         "params": unique, "differences": []},
        {"convention": "every name counted", "equals": "named_parameters(remove_duplicate=False)",
         "params": every, "differences": alias_rows},
        {"convention": "torchinfo 1.8 summary", "equals": "torchinfo.summary(model) Total params",
         "params": torchinfo, "differences": torchinfo_extra},
        {"convention": "stored parameter elements", "equals": "elements of the parameter tensors the file stores, each storage once",
         "params": stored, "differences": twice},
        {"convention": "file tensor list", "equals": "sum over every parameter name in the file (a naive state_dict loop)",
         "params": file_names, "differences": in_file_aliases + twice},
    ]
    return {"rows": rows, "not_counted": non_params}


def _same_subtree_bias(t: Tie) -> bool:
    """A tie inside one head (decoder.bias = predictions.bias): the parent module's parameter is
    also its child's, so torchinfo's leftover rule counts it once."""
    parent = t.target.rpartition(".")[0]
    return t.alias.startswith(parent + ".")


def cross_check(ckpt: Checkpoint, ties: list[Tie]) -> dict:
    """The parameters config.json says the model has, against the file's: missing (each with its
    explanation when a tie accounts for it), unexpected, and shape mismatches."""
    from .arch.spec import from_config
    from .arch.tensors import expected_tensors
    from .errors import UsageError

    if not ckpt.config:
        return {"available": False, "reason": "no config.json"}
    try:
        spec = from_config(ckpt.config, ckpt.config_path or "config.json")
    except UsageError as e:
        return {"available": False, "reason": str(e)}
    expected = expected_tensors(spec)
    if expected is None:
        return {"available": False, "reason": f"no tensor template for {spec.model_type}"}
    place = placements(ckpt)
    params = {n: t for n, t in ckpt.tensors.items() if place[n].role == "parameter"}
    # The file may wrap every name (`module.`): find the prefix from one expected name it holds.
    outer = next((n[: -len(e)] for e in expected for n in params if n.endswith(e) and (n == e or n[-len(e) - 1] == ".")), "")
    expected = {outer + n: shape for n, shape in expected.items()}
    tie_of = {t.alias: t for t in ties}
    missing = []
    for name, shape in expected.items():
        if name not in params:
            t = tie_of.get(name)
            missing.append({"name": name, "shape": list(shape), "elements": math.prod(shape),
                            "why": f"tied to {t.target} ({t.evidence})" if t else "not in the file"})
    unexpected = [{"name": n, "shape": list(t.shape), "elements": t.numel} for n, t in params.items() if n not in expected]
    mismatched = [{"name": n, "file": list(t.shape), "config": list(expected[n])}
                  for n, t in params.items() if n in expected and t.shape != expected[n]]
    return {"available": True, "head": spec.head, "architecture": spec.architecture, "expected": len(expected),
            "missing": missing, "unexpected": unexpected, "shape_mismatches": mismatched}


def audit(ckpt: Checkpoint, deep: bool = False, chunk_bytes: int = 16 << 20) -> dict:
    ties = find_ties(ckpt, deep=deep, chunk_bytes=chunk_bytes)
    check = cross_check(ckpt, ties)
    table = counting(ckpt, ties)
    # model.parameters() of the model the config builds: the file's unique parameters, plus those the
    # model has and the file lacks (untied), minus those the model would not load.
    row = {"convention": "model.parameters()", "equals": "sum(p.numel() for p in model.parameters()) of the model config.json builds",
           "params": table["rows"][0]["params"], "differences": []}
    if check["available"]:
        for m in check["missing"]:
            if m["why"] == "not in the file":
                row["differences"].append({"name": m["name"], "elements": m["elements"], "why": "the model has it; the file does not"})
        for u in check["unexpected"]:
            row["differences"].append({"name": u["name"], "elements": -u["elements"], "why": "in the file; the model has no such parameter"})
        for m in check["shape_mismatches"]:
            d = math.prod(m["config"]) - math.prod(m["file"])
            row["differences"].append({"name": m["name"], "elements": d, "why": f"shape {m['file']} in the file, {m['config']} per config"})
        row["params"] += sum(d["elements"] for d in row["differences"])
    else:
        row["equals"] += f" (assumed equal to the file's: {check['reason']})"
    table["rows"].insert(1, row)
    return {
        "schema": TIES_SCHEMA,
        "path": ckpt.path,
        "format": ckpt.format,
        "config": ckpt.config_path,
        "tie_word_embeddings": _tie_word_embeddings(ckpt),
        "deep": deep,
        "ties": [t.__dict__ for t in ties],
        "counting": table,
        "cross_check": check,
    }


def verdict(ckpt: Checkpoint) -> dict:
    """The summary's tie line and its data (headers and config only)."""
    ties = find_ties(ckpt)
    evidence = sorted({t.evidence for t in ties})
    text = (f"{len(ties)} tied name(s) counted once ({', '.join(evidence)}): see `ckptstat ties`" if ties
            else "none found in headers or config (`ckptstat ties --deep` compares contents)")
    return {"count": len(ties), "text": text,
            "pairs": [{"alias": t.alias, "target": t.target, "evidence": t.evidence, "status": t.status} for t in ties]}


DIFF_SCHEMA = "ckptstat.diff/1"


def _by_module(ckpt: Checkpoint) -> dict[str, dict]:
    place = placements(ckpt)
    alias_of = {t.alias: t for t in find_ties(ckpt)}
    out: dict[str, dict] = {}
    for t in ckpt:
        if place[t.name].role != "parameter":
            continue
        module = strip_prefixes(t.name, base_models=True).rpartition(".")[0] or "(root)"
        row = out.setdefault(module, {"params": 0, "tied": []})
        tie = alias_of.get(t.name)
        if tie is None:
            row["params"] += t.numel
        else:
            row["tied"].append(f"{t.name} = {tie.target}")
    for tie in alias_of.values():  # names absent because tied: the module exists, at no cost
        if tie.alias not in ckpt.tensors:
            module = strip_prefixes(tie.alias, base_models=True).rpartition(".")[0] or "(root)"
            out.setdefault(module, {"params": 0, "tied": []})["tied"].append(f"{tie.alias} = {tie.target}")
    return out


def diff(a: Checkpoint, b: Checkpoint) -> dict:
    """Unique parameters per module of two checkpoints (base-model prefixes such as `bert.` ignored),
    itemising where their totals part: modules only in one, and modules whose counts differ."""
    ma, mb = _by_module(a), _by_module(b)
    rows = []
    for module in sorted(set(ma) | set(mb)):
        pa, pb = ma.get(module, {}).get("params"), mb.get(module, {}).get("params")
        tied = ma.get(module, {}).get("tied", []) + mb.get(module, {}).get("tied", [])
        if pa != pb or tied and (module not in ma or module not in mb):
            rows.append({"module": module, "a": pa, "b": pb, "delta": (pb or 0) - (pa or 0), "tied": tied})
    ta = sum(r["params"] for r in ma.values())
    tb = sum(r["params"] for r in mb.values())
    return {"schema": DIFF_SCHEMA, "a": a.path, "b": b.path, "a_format": a.format, "b_format": b.format,
            "a_params": ta, "b_params": tb, "delta": tb - ta,
            "rows": rows}
