"""A PEFT adapter's report (schema ckptstat.adapter/1): its type, rank and alpha (with their per-module
patterns), target modules, parameters per target and per adapted module, modules_to_save apart, and with
a base model, the base's totals beside the merged model's. Headers and adapter_config.json only
(docs/adapters.md).

The names follow peft's `get_peft_model_state_dict` (peft/utils/save_and_load.py): every key of a tuner
layer is `base_model.model.<module>.<prefix><param>` with the adapter name removed (`q_proj.lora_A.weight`),
where `<prefix>` is the tuner model's `prefix` (peft/tuners/<method>/model.py); modules_to_save copies are
`base_model.model.<module>.<param>` (their `modules_to_save.default.` removed); tensors one tuner shares
between modules (VeRA's vera_A/vera_B) are `base_model.<name>`; prompt-learning methods store
`prompt_embeddings` alone."""
from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Collection
from typing import Any

from ...census import aliases, logical, parameters
from ...census.ties import find_ties
from ...core import Checkpoint, TensorInfo
from ...errors import UsageError
from .match import Endings, Names, Patterns

ADAPTER_SCHEMA = "ckptstat.adapter/1"

# peft/utils/peft_types.py PeftType -> (the name printed, the `prefix` of every parameter the tuner adds).
TUNERS: dict[str, tuple[str, str]] = {
    "LORA": ("LoRA", "lora_"), "ADALORA": ("AdaLoRA", "lora_"), "XLORA": ("X-LoRA", "lora_"),
    "IA3": ("IA3", "ia3_"), "LOHA": ("LoHa", "hada_"), "LOKR": ("LoKr", "lokr_"), "OFT": ("OFT", "oft_"),
    "BOFT": ("BOFT", "boft_"), "VERA": ("VeRA", "vera_lambda_"), "PVERA": ("PVeRA", "pvera_lambda_"),
    "FOURIERFT": ("FourierFT", "fourierft_"), "HRA": ("HRA", "hra_"), "VBLORA": ("VB-LoRA", "vblora_"),
    "LN_TUNING": ("LayerNorm tuning", "ln_tuning_"), "POLY": ("Poly", "poly_"), "MISS": ("MiSS", "miss_"),
    "RANDLORA": ("RandLoRA", "randlora_"), "ROAD": ("RoAd", "road_"), "SHIRA": ("SHiRA", "shira_"),
    "C3A": ("C3A", "c3a_"), "TRAINABLE_TOKENS": ("trainable tokens", "trainable_tokens_"), "HIRA": ("HiRA", "hira_"),
    "WAVEFT": ("WaveFT", "waveft_"), "OSF": ("OSF", "osf_"), "DELORA": ("DeLoRA", "delora_"),
    "GRALORA": ("GraLoRA", "gralora_"), "TINYLORA": ("TinyLoRA", "tinylora_"), "PSOFT": ("PSOFT", "psoft_"),
    "ADAMSS": ("AdaMSS", "adamss_"), "BEFT": ("BEFT", "beft_"), "LILY": ("Lily", "lily_"), "GLORA": ("GLoRA", "glora_"),
    "UNILORA": ("Uni-LoRA", "unilora_"), "FROD": ("FRoD", "frod_"), "SHADOW": ("Shadow", "shadow_"),
    "SUPERTUNING": ("SuperTuning", "supertuning_"), "DEFT": ("DEFT", "deft_"), "PEANUT": ("PEANuT", "peanut_"),
    "ADAPTION_PROMPT": ("adaption prompt (LLaMA-Adapter)", "adaption_"),
}
# PeftConfig.is_prompt_learning (peft/config.py PromptLearningConfig subclasses): virtual tokens, no merge.
PROMPT_LEARNING = {"PROMPT_TUNING": "prompt tuning", "MULTITASK_PROMPT_TUNING": "multitask prompt tuning",
                   "P_TUNING": "P-tuning", "PREFIX_TUNING": "prefix tuning", "CPT": "context-aware prompt tuning (CPT)",
                   "CARTRIDGE": "cartridge"}
# Methods merge_and_unload cannot fold into the base weights (they add computation at run time).
NOT_MERGEABLE = {"ADAPTION_PROMPT", "XLORA", "POLY"}
ALL_PREFIXES = tuple(sorted({p for _, p in TUNERS.values()}))
# Where peft's own names say otherwise than the key's place: tensors saved under a module that the tuner's layer holds
# as frozen buffers (its `other_param_names`), and tensors saved once under `base_model.` that are trainable (its
# `adapter_layer_names`: a bank or vector every module draws on). peft 0.21's tuners/<method>/layer.py;
# tests/test_adapters.py checks both sets against those classes.
FROZEN_IN_MODULE = frozenset({"randlora_A", "randlora_B", "shira_indices", "tinylora_A", "tinylora_B", "tinylora_P",
                              "delora_w_norm"})
TRAINABLE_SHARED = frozenset({"vblora_vector_bank", "unilora_theta_d", "tinylora_v"})
# Module wrappers peft puts between a module's name and its own tensors (LoRA's base_layer, trainable tokens).
WRAPPERS = {"base_layer", "token_adapter", "modules_to_save", "original_module"}

MERGE_RULE = ("merged = base with the adapter folded in (peft merge_and_unload): an adapted weight is updated in "
              "place (LoRA, DoRA, IA3, LoHa, LoKr, OFT, VeRA...: shapes unchanged, +0); a modules_to_save copy, a "
              "trained bias or a saved base weight replaces the base tensor of its name (+0 when the base holds it "
              "at that shape; its size when the base lacks it, e.g. a new classifier head, or when the copy unties a "
              "name of a tied group from the others, unless ensure_weight_tying ties them to the copy); "
              "trainable-token deltas are written into the embedding rows (+0). "
              "Unmerged = base + the tuner's parameters + modules_to_save copies (trained biases are the base's own; "
              "AdaLoRA adds one unsaved ranknum scalar per module): what peft's get_nb_trainable_parameters calls "
              "'all params'")


def _num(v: Any) -> int | float | None:
    """A rank or alpha from the config: a number, else None (a hostile config may hold anything)."""
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _dict(v: Any) -> dict[str, Any]:
    """A config field that should be a mapping (a hand-edited or hostile config may hold anything); AdaLoRA's
    rank_pattern maps each lora_E to the mask of ranks its budget kept: their count."""
    def value(x: Any) -> int | float | None:
        return sum(x) if isinstance(x, list) and all(isinstance(b, bool) for b in x) else _num(x)
    return {str(k): value(x) for k, x in v.items()} if isinstance(v, dict) else {}


def _list(v: Any) -> list[Any]:
    return list(v) if isinstance(v, list) else []


def _strip_wrappers(segs: list[str]) -> str:
    """The module's own name: wrappers dropped, and the adapter name after `modules_to_save` (a key saved
    without peft's renaming, `classifier.modules_to_save.default.weight`)."""
    out: list[str] = []
    for i, s in enumerate(segs):
        if s not in WRAPPERS and not (i and segs[i - 1] in ("modules_to_save", "original_module")):
            out.append(s)
    return ".".join(out)


_MTS: tuple[object, Endings] = (None, Endings(()))


def _modules_to_save(cfg: dict[str, Any]) -> Endings:
    """The config's modules_to_save as a matcher, built once per config list (classify runs per tensor)."""
    global _MTS
    value = cfg.get("modules_to_save")
    if _MTS[0] is not value:
        _MTS = (value, Endings(m for m in _list(value) if isinstance(m, str)))
    return _MTS[1]


def _saved_module(module: str, cfg: dict[str, Any]) -> int:
    """How many of `module`'s parts name the module a modules_to_save entry wrapped (0: none): the outermost
    whose name, as peft's named_modules spell it, ends with an entry (peft/utils/other.py `_set_trainable`).
    A whole block (`layers.1.mlp`) is saved as its tensors, `layers.1.mlp.down_proj.weight`."""
    full, mts = f"base_model.model.{module}.", _modules_to_save(cfg)
    k, end = 0, full.find(".", len("base_model.model."))
    while end >= 0:
        k += 1
        if mts.match(full, end):
            return k
        end = full.find(".", end + 1)
    return 0


def classify(name: str, cfg: dict[str, Any], names: Collection[str] = ()) -> tuple[str, str, str]:
    """(kind, module, param) of one adapter tensor. kind: adapter (a tuner parameter), shared (a frozen
    tensor the tuner shares between modules, or one a module holds as a buffer: FROZEN_IN_MODULE),
    trainable_shared (a tuner parameter saved once for every module: TRAINABLE_SHARED), prompt (virtual-token
    embeddings), modules_to_save, bias
    (a base bias trained with bias='all'/'lora_only'), base (a base weight saved beside the adapter, e.g.
    a resized embedding), copy (a second copy of a saved tensor: with bias='all' peft also saves a
    modules_to_save wrapper's own `X.modules_to_save.bias` beside its copy `X.bias`, and the frozen
    `X.original_module.bias`; `names`, the file's tensor names, tells the first from a copy saved unrenamed)."""
    if name.startswith("base_model.model."):
        rest = name[len("base_model.model."):]
    elif name.startswith("base_model."):
        rest = name[len("base_model."):]
        return "trainable_shared" if rest.split(".")[0] in TRAINABLE_SHARED else "shared", "", rest
    else:
        return "prompt", "", name
    segs = rest.split(".")
    for i, s in enumerate(segs):
        if s.startswith(ALL_PREFIXES):
            return "shared" if s in FROZEN_IN_MODULE else "adapter", _strip_wrappers(segs[:i]), ".".join(segs[i:])
    module, param = _strip_wrappers(segs[:-1]), segs[-1]
    if "original_module" in segs[:-1] or ("modules_to_save" in segs[:-1] and names and
                                          name.replace(".modules_to_save.", ".", 1) in names):
        return "copy", module, param
    k = _saved_module(module, cfg)
    if k:
        parts = module.split(".")
        return "modules_to_save", ".".join(parts[:k]), ".".join(parts[k:] + [param])
    if param == "bias" and cfg.get("bias", "none") not in (None, "none"):
        return "bias", module, param
    return "base", module, param


def _wrapped_parameters(module: str, cfg: dict[str, Any]) -> list[str]:
    """The parameters of `module` a LoRA config's `target_parameters` names (peft/tuners/tuners_utils.py
    `_inject_parameters`: the key `<module>.<param>` is an entry or ends with `.<entry>`), in sorted entry order."""
    out = []
    for entry in sorted(e for e in _list(cfg.get("target_parameters")) if isinstance(e, str)):
        owner, _, param = entry.rpartition(".")
        if param not in out and (not owner or module == owner or module.endswith("." + owner)):
            out.append(param)
    return out


def _rank_of(param: str, t: TensorInfo) -> int | None:
    """The rank a tensor stores: LoRA/AdaLoRA/DoRA `lora_A` [r, in] (embeddings: `lora_embedding_A`
    [r, vocab]), VeRA `vera_lambda_d` [r]."""
    if param.split(".")[0] in ("lora_A", "lora_embedding_A") and t.shape:
        return t.shape[0]
    if param == "vera_lambda_d" and t.shape:
        return t.shape[0]
    return None


def adapter_type(cfg: dict[str, Any], names: list[str]) -> dict[str, Any]:
    peft_type = str(cfg.get("peft_type") or "unknown")
    label = PROMPT_LEARNING.get(peft_type) or TUNERS.get(peft_type, (peft_type, ""))[0]
    dora = bool(cfg.get("use_dora")) or any("lora_magnitude_vector" in n for n in names)
    if peft_type == "LORA" and dora:
        label = "DoRA (LoRA with weight decomposition)"
    extras = [w for w, on in (("rsLoRA scaling alpha/sqrt(r)", cfg.get("use_rslora")),
                              ("trainable tokens", cfg.get("trainable_token_indices")),
                              ("LoRA bias", cfg.get("lora_bias"))) if on]
    return {"peft_type": peft_type, "name": label, "dora": dora, "prompt_learning": peft_type in PROMPT_LEARNING,
            "extras": extras, "task_type": cfg.get("task_type"), "base_model": cfg.get("base_model_name_or_path"),
            "peft_version": cfg.get("peft_version")}


def adapter_report(ckpt: Checkpoint, base: Checkpoint | None = None) -> dict:
    """The adapter's report; with `base`, the base model's totals and the merged model's beside it."""
    if ckpt.adapter is None:
        raise UsageError(f"{ckpt.path}: not a PEFT adapter (no adapter_config.json beside adapter_model.*)")
    cfg: dict[str, Any] = dict(ckpt.adapter)
    alias_of = aliases(ckpt)
    tensors = [t for t in ckpt if t.name not in alias_of]
    _modules_to_save(cfg).work = 0
    names = {t.name for t in tensors}
    kind_of = {t.name: classify(t.name, cfg, names) for t in tensors}
    typ = adapter_type(cfg, [t.name for t in tensors])
    # AdaLoRA ignores `r`: its layers start at init_r (peft/tuners/adalora/model.py _create_and_replace)
    r_cfg = _num(cfg.get("init_r" if typ["peft_type"] == "ADALORA" else "r"))
    alpha = _num(cfg.get("lora_alpha", cfg.get("alpha")))
    rank_pattern, alpha_pattern = _dict(cfg.get("rank_pattern")), _dict(cfg.get("alpha_pattern"))
    targets_cfg: Any = cfg.get("target_modules")
    target_list = [t for t in targets_cfg if isinstance(t, str)] if isinstance(targets_cfg, list) else []
    targets_cfg = target_list if isinstance(targets_cfg, list) else targets_cfg if isinstance(targets_cfg, str) else None

    ranks, alphas = Patterns(rank_pattern, ckpt.adapter_path), Patterns(alpha_pattern, ckpt.adapter_path)
    targets_of = Names(target_list)
    modules: dict[str, dict] = {}
    totals: dict[str, int] = defaultdict(int)
    mts: dict[str, dict] = {}
    others: list[dict] = []
    for t in tensors:
        kind, module, param = kind_of[t.name]
        totals[kind] += t.numel
        if kind == "adapter":
            row = modules.setdefault(module, {"module": module, "params": 0, "tensors": 0, "rank": None, "parts": []})
            row["params"] += t.numel
            row["tensors"] += 1
            row["parts"].append({"param": param, "shape": list(t.shape), "numel": t.numel})
            row["rank"] = row["rank"] or _rank_of(param, t)
        elif kind == "modules_to_save":
            row = mts.setdefault(module, {"module": module, "params": 0, "tensors": 0})
            row["params"] += t.numel
            row["tensors"] += 1
        else:
            others.append({"name": t.name, "kind": kind, "shape": list(t.shape), "numel": t.numel})
    for module, row in modules.items():
        # trainable-token rows (peft/tuners/trainable_tokens) have no rank or alpha
        tokens = all(p["param"].startswith("trainable_tokens_") for p in row["parts"])
        wrapped = [] if tokens else _wrapped_parameters(module, cfg)
        keys = [f"{module}.{w}" for w in wrapped] or [module]   # peft matches a parameter's patterns on its key
        rks, aks = {ranks.match(k) for k in keys}, {alphas.match(k) for k in keys}
        rk, ak = (None, None) if tokens or len(rks) > 1 or len(aks) > 1 else (rks.pop(), aks.pop())
        several = len(rks) > 1 or len(aks) > 1   # the wrapped parameters' patterns differ: no one rank or alpha
        row["config_rank"] = None if tokens or several else rank_pattern[rk] if rk is not None else r_cfg
        row["alpha"] = None if tokens or several else alpha_pattern[ak] if ak is not None else alpha
        row["pattern"] = {"rank": rk, "alpha": ak}
        if wrapped:   # LoRA on a 3-D experts parameter (ParamWrapper): lora_A is [r x experts, in]
            row["parameters"] = wrapped
            r, stored = row["config_rank"], row["rank"]
            if isinstance(r, int) and r > 0 and isinstance(stored, int) and stored % r == 0:
                row["rank"], row["experts"] = r, stored // r
        row["target"] = (targets_of.match(module) or module.rsplit(".", 1)[-1]) + (" (trainable tokens)" if tokens else "")
        # AdaLoRA divides by ranknum, init_r, whatever ranks its budget kept (saved resized, rank_pattern's masks)
        r = row["config_rank"] or row["rank"] if typ["peft_type"] == "ADALORA" else row["rank"] or row["config_rank"]
        row["scale"] = _scale(row["alpha"], r, bool(cfg.get("use_rslora")), typ["peft_type"])

    targets: dict[str, dict] = {}
    for row in modules.values():
        g = targets.setdefault(row["target"], {"target": row["target"], "modules": 0, "params": 0, "ranks": set(),
                                               "alphas": set()})
        g["modules"] += 1
        g["params"] += row["params"]
        g["ranks"].add(row["rank"] or row["config_rank"])
        g["alphas"].add(row["alpha"])
    target_rows = [{**g, "ranks": sorted(x for x in g["ranks"] if x is not None),
                    "alphas": sorted(x for x in g["alphas"] if isinstance(x, (int, float)))} for g in targets.values()]

    tuner = totals["adapter"] + totals["trainable_shared"] + totals["prompt"]
    trainable = tuner + totals["modules_to_save"] + totals["bias"]
    stored = sum(totals.values())
    notes = _notes(cfg, typ, totals)
    report: dict[str, Any] = {
        "schema": ADAPTER_SCHEMA,
        "path": ckpt.path,
        "format": ckpt.format,
        "files": [{"path": f} for f in ckpt.files],
        "adapter_config": ckpt.adapter_path,
        "type": typ,
        "rank": {"r": r_cfg, "alpha": alpha, "rank_pattern": rank_pattern, "alpha_pattern": alpha_pattern,
                 "use_rslora": bool(cfg.get("use_rslora")),
                 "stored_ranks": sorted({m["rank"] for m in modules.values() if m["rank"] is not None})},
        "target_modules": targets_cfg,
        "target_parameters": [e for e in _list(cfg.get("target_parameters")) if isinstance(e, str)],
        "targets": sorted(target_rows, key=lambda g: -g["params"]),
        "modules": list(modules.values()),
        "modules_to_save": {"config": cfg.get("modules_to_save"), "modules": list(mts.values()),
                            "params": totals["modules_to_save"]},
        "other_tensors": others,
        "parameters": {"adapter": tuner, "modules_to_save": totals["modules_to_save"],
                       "biases": totals["bias"], "trainable": trainable, "shared_frozen": totals["shared"],
                       "base_weights": totals["base"], "stored": stored, "tensors": len(tensors)},
        "counting": ("every stored tensor once; trainable = the tuner's parameters + modules_to_save copies + trained "
                     "biases (peft's trainable parameters); frozen shared projections and base weights saved beside "
                     "the adapter are counted apart"),
        "prompt": _prompt(cfg) if typ["prompt_learning"] else None,
        "notes": notes,
    }
    if base is not None:
        report["base"] = compare_base(report, ckpt, base, cfg, typ)
    return report


def _scale(alpha: Any, r: Any, rslora: bool, peft_type: str) -> float | None:
    """LoRA's scaling of B@A (peft/tuners/lora/layer.py update_layer): alpha / r, or alpha / sqrt(r); AdaLoRA
    multiplies by alpha and divides by ranknum, its initial rank (peft/tuners/adalora/layer.py forward)."""
    if peft_type not in ("LORA", "ADALORA") or not isinstance(alpha, (int, float)) or not isinstance(r, int) or r <= 0:
        return None
    return alpha / math.sqrt(r) if rslora else alpha / r


def _prompt(cfg: dict[str, Any]) -> dict[str, Any]:
    keys = ("num_virtual_tokens", "token_dim", "num_layers", "num_attention_heads", "num_transformer_submodules",
            "prefix_projection", "encoder_hidden_size", "encoder_reparameterization_type", "prompt_tuning_init")
    return {k: cfg[k] for k in keys if k in cfg}


def _notes(cfg: dict[str, Any], typ: dict[str, Any], totals: dict[str, int]) -> list[str]:
    notes = []
    if typ["peft_type"] == "P_TUNING" or cfg.get("prefix_projection"):
        notes.append("the prompt encoder trained with the adapter (MLP/LSTM) is not saved: only its output "
                     "embeddings are (peft get_prompt_embedding_to_save), so peft's trainable count was larger")
    if typ["peft_type"] == "ADALORA":
        notes.append("AdaLoRA stores init_r ranks while it trains (the ranks its lora_E masks keep are in the values, "
                     "not the headers); once its budget has pruned them, each module is saved resized (rank_pattern)")
    if totals["shared"]:
        notes.append("frozen tensors saved with the adapter (VeRA's shared vera_A/vera_B with save_projection=True, "
                     "RandLoRA's random bases, SHiRA's indices...) are buffers at run time, not trainable parameters")
    if totals["base"]:
        notes.append("base weights saved beside the adapter (peft save_embedding_layers: a resized or targeted "
                     "embedding) replace the base's when loaded")
    if totals["copy"]:
        notes.append(f"{totals['copy']:,} parameters are second copies peft saved with bias='all' (a "
                     "modules_to_save wrapper's `modules_to_save` and `original_module` tensors beside its copy): "
                     "not trainable, not counted again")
    if isinstance(cfg.get("target_modules"), str):
        notes.append(f"target_modules is a pattern ({cfg['target_modules'][:200]!r}); targets are grouped by module name")
    return notes


def _suffix_index(names: list[str]) -> dict[str, str | None]:
    """Every `.`-suffix of at least two segments -> the one name ending with it (None when ambiguous), so
    an adapter saved over `LlamaForCausalLM` finds the base's tensors stored as `LlamaModel` and back."""
    out: dict[str, str | None] = {}
    for n in names:
        segs = n.split(".")
        for i in range(len(segs) - 1):
            suffix = ".".join(segs[i:])
            out[suffix] = n if suffix not in out or out[suffix] == n else None
    for n in names:
        out[n] = n
    return out


def _find(index: dict[str, str | None], name: str) -> str | None:
    segs = name.split(".")
    for i in range(len(segs) - 1):
        hit = index.get(".".join(segs[i:]))
        if hit:
            return hit
    return None


def compare_base(report: dict, ckpt: Checkpoint, base: Checkpoint, cfg: dict[str, Any], typ: dict[str, Any]) -> dict:
    """The base's parameters, the unmerged total and the merged model's (MERGE_RULE), and whether the
    adapter fits: every adapted module found in the base, LoRA shapes agreeing with the base weight."""
    base_params = parameters(base)
    by_name = {t.name: t for t in base_params}
    stored = {t.name: t for t in logical(base)}   # a quantised base (QLoRA) by its logical shapes
    tied = {t.alias: t.target for t in find_ties(base)}   # counted once in the base: its group's one tensor
    index = _suffix_index(list(stored) + [a for a in tied if a not in stored])
    base_total = sum(t.numel for t in base_params)
    missing, mismatched = [], []
    for row in report["modules"]:
        if row.get("parameters"):   # parameters LoRA wraps in place (target_parameters): their own names
            if any(_find(index, f"{row['module']}.{w}") is None for w in row["parameters"]):
                missing.append(row["module"])
            continue
        hit = _find(index, row["module"] + ".weight")
        if hit is None:
            missing.append(row["module"])
            continue
        bad = _lora_misfit(row, stored[tied.get(hit, hit)].shape)   # a tied head: its group's stored tensor
        if bad:
            mismatched.append(f"{row['module']}: {bad}")
    delta, replaced, added = 0, 0, 0
    alias_of = aliases(ckpt)
    names = {t.name for t in ckpt if t.name not in alias_of}
    groups: dict[str, dict[str, tuple[int, str]]] = defaultdict(dict)   # a tied group -> its names saved: (size, kind)
    for t in ckpt:
        if t.name not in names:
            continue
        kind, module, param = classify(t.name, cfg, names)
        if kind not in ("modules_to_save", "bias", "base"):
            continue
        hit = _find(index, f"{module}.{param}")
        group = tied.get(hit, hit) if hit is not None else None
        if hit is not None and group in by_name and (hit in tied or group in tied.values()):
            groups[group][hit] = (t.numel, kind)   # one name of a tied group (below)
        elif hit is not None and hit in by_name:
            delta += t.numel - by_name[hit].numel
            replaced += 1
        else:   # the base lacks it (a new head), or holds it tied to another tensor: merging adds it
            delta += t.numel
            added += 1
    for group, saved in groups.items():
        # merge_and_unload swaps a modules_to_save module for its copy: names of the group it does not replace keep
        # the base's tensor, so the copies are new tensors beside it (GPT-2's lm_head copy unties it from wte; an
        # embed_tokens copy from a tied lm_head); with ensure_weight_tying peft ties the group to one copy (and saves
        # it under each name). Weights saved without a copy (save_embedding_layers) are loaded in place: +0.
        size = by_name[group].numel
        replaced += len(saved)
        if all(kind != "modules_to_save" for _, kind in saved.values()):
            delta += max(n for n, _ in saved.values()) - size
            continue
        members = {group} | {a for a, g in tied.items() if g == group}
        kept = size if members - set(saved) else 0
        copies = [n for n, _ in saved.values()]
        delta += (max(copies) if cfg.get("ensure_weight_tying") else sum(copies)) + kept - size
    mergeable = not typ["prompt_learning"] and typ["peft_type"] not in NOT_MERGEABLE
    p = report["parameters"]
    trainable = p["trainable"]
    unmerged = base_total + p["adapter"] + p["modules_to_save"]
    if typ["peft_type"] == "ADALORA":   # peft/tuners/adalora/layer.py: ranknum, nn.Parameter(requires_grad=False)
        unmerged += len(report["modules"])
    notes = []
    if missing:
        notes.append(f"{len(missing)} adapted module(s) have no weight in the base (e.g. {missing[0]}): is this the "
                     "adapter's base model?")
    if mismatched:
        notes.append(f"{len(mismatched)} adapted module(s) disagree with the base's shapes (e.g. {mismatched[0]})")
    return {
        "path": base.path, "format": base.format, "params": base_total,
        "unmerged": unmerged,
        "merged": base_total + delta if mergeable else None,
        "merge_rule": MERGE_RULE if mergeable else (f"{typ['name']} is not merged into the weights: it runs beside "
                                                    "the base (virtual tokens or extra modules), so the model at run "
                                                    "time is base + adapter"),
        "replaced_tensors": replaced, "added_tensors": added,
        "modules_found": len(report["modules"]) - len(missing), "modules_missing": missing[:20],
        "shape_mismatches": mismatched[:20], "adapter_share": trainable / base_total if base_total else None,
        "notes": notes,
    }


def _lora_misfit(row: dict, shape: tuple[int, ...]) -> str | None:
    """A LoRA pair fits a base weight [out, in] (or [in, out] for GPT-2's Conv1D, fan_in_fan_out) when
    lora_A is [r, in] and lora_B [out, r]; embeddings: lora_embedding_A [r, vocab], _B [dim, r]."""
    parts = {p["param"].split(".")[0]: p["shape"] for p in row["parts"]}
    a, b = parts.get("lora_A") or parts.get("lora_embedding_A"), parts.get("lora_B") or parts.get("lora_embedding_B")
    if not a or not b or len(a) != 2 or len(b) != 2 or len(shape) < 2:
        return None
    want = (b[0], a[1])
    if "lora_embedding_A" in parts:
        want = (a[1], b[0])
    if tuple(shape[:2]) in (want, want[::-1]):
        return None
    return f"adapter implies {list(want)}, base weight is {list(shape)}"
