"""Which parameter each index-keyed optimizer state belongs to (docs/training.md, "Optimizer state per parameter").

A torch optimizer's state_dict keys its state by index: the parameter's position in the param groups' `params`,
all groups in order (torch/optim/optimizer.py `state_dict`). The file names that parameter where the optimizer was
built from named_parameters() (`param_names`: Checkpoint.optimizer_params), a DCP/FSDP state by its key, a ZeRO
partition by its slice map (Checkpoint.optimizer_fragments). Otherwise (the Trainer's default AdamW, Lightning's
`self.parameters()`, DeepSpeed without ZeRO) the order is derived, and every derived mapping is checked:

- the parameters in the order the optimizer was given them: the model's `named_parameters()` built on the meta
  device from the folder's config.json (`run` extra: torch and transformers), else the order of the parameters in
  the file when the format keeps the writer's order (a torch.save'd state_dict: module order; a tied weight once,
  as named_parameters() gives it once; never a safetensors file, whose writers sort the names);
- split as the builder splits them: transformers' `Trainer.create_optimizer` gives group 0 the parameters
  `get_decay_parameter_names` names and group 1 the others (on the meta device: transformers' own function; in the
  file's order: its name rule, the nn.LayerNorm type it also excludes being invisible in names); one group: all;
- each group's states laid on its parameters in order, every state's `exp_avg_sq` / `exp_avg` shape equal to its
  parameter's. A group may have fewer states than parameters (frozen parameters, which the Trainer leaves out by
  requires_grad): the assignment is taken only when it is the one order-preserving assignment that fits the shapes.
  A group whose counts or shapes do not fit, or whose assignment is not unique, is refused with the reason; no state
  is attributed on a guess.
"""
from __future__ import annotations

import functools
import json
import re
from typing import Any

from ..census import aliases, placements
from ..core import Checkpoint
from ..families.framework.base import architectures
from . import meta

NAMED, META, ORDER, NONE = ("named in file", "derived from named_parameters on the meta device",
                            "from the state-dict order, shape-checked", "none")
SHAPED = ("exp_avg_sq", "exp_avg")   # torch Adam/AdamW's per-element state: the parameter's shape
TRAINER = "transformers Trainer"
# transformers trainer.py Trainer.get_decay_parameter_names (5.x): no weight decay for names matching these (and for
# nn.LayerNorm's parameters, a type names do not show: a split it gets wrong fails the counts)
NO_DECAY = re.compile(r"bias|layernorm|rmsnorm|(?:^|\.)norm(?:$|\.)|_norm(?:$|\.)")
MAX_WORK = 2_000_000   # states x parameters left out, the assignment search's table

Param = tuple[str, tuple[int, ...]]   # (the checkpoint's name, shape)


def optimizer_names(ckpt: Checkpoint, build: bool = True) -> tuple[dict[str, str], list[dict]]:
    """(state prefix `optimizer.state.3` -> the checkpoint's name of its parameter, for every state the file names
    or a checked mapping gives; one row per optimizer state and group saying which mapping was used, or why none).
    `build`: the model may be built on the meta device for its order (seconds of importing torch and transformers:
    `trend`, which reads the states; `summary` reads headers and says what trend would do)."""
    return ckpt.derived(("optimizer_names", build), functools.partial(_compute, build=build))


def _compute(ckpt: Checkpoint, build: bool) -> tuple[dict[str, str], list[dict]]:
    names = dict(ckpt.optimizer_params)
    rows: list[dict] = []
    if ckpt.optimizer_params:
        rows.append({"state": "param_groups' param_names", "mapping": NAMED, "mapped": len(ckpt.optimizer_params)})
    if ckpt.optimizer_fragments:
        rows.append({"state": "ZeRO partition maps (param_slice_mappings, ZeRO-3 param_shapes)", "mapping": NAMED,
                     "mapped": sum(len(f) for f in ckpt.optimizer_fragments.values())})
    # (a ZeRO flat partition's groups are not the parameters': its slice map names them, above)
    todo = {state: groups for state, groups in ckpt.optimizer_groups.items()
            if not any(f"{state}.{i}" in ckpt.optimizer_fragments for g in groups for i in g)}
    if not todo:
        return names, rows
    order, nodecay, method, why = _order(ckpt, build)
    for state, groups in todo.items():
        splits, refusal = _split(ckpt, groups, len(todo), order, nodecay, why)
        listed = [i for g in groups for i in g]
        if len(set(listed)) != len(listed):   # (torch numbers each parameter once: a damaged or hand-made file)
            splits, refusal = None, "an index is listed twice in the param groups"
        for g, indices in enumerate(groups):
            row: dict[str, Any] = {"state": state, "group": g, "parameters": len(indices), "mapping": NONE, "mapped": 0}
            if refusal is None and splits is not None:
                got, reason = fit(_state_shapes(ckpt, state, indices), splits[g])
                if got is not None:
                    names.update({f"{state}.{i}": n for i, n in got.items()})
                    row.update(mapping=method, mapped=len(got))
                row["reason"] = "; ".join(x for x in (reason, why) if x) or None
            else:
                row["reason"] = refusal
            rows.append(row)
    return names, rows


Order = tuple[list[Param] | None, set[str] | None, str, str | None]


def _order(ckpt: Checkpoint, build: bool) -> Order:
    """(the parameters in named_parameters() order, those Trainer.get_decay_parameter_names leaves out where
    transformers said, how the order was found, why there is none or what was tried first)."""
    tried = None
    buildable = bool(ckpt.config and architectures(ckpt.config))
    if buildable and not build:
        tried = "the meta-device model not built here (`ckptstat trend` builds it)"
    elif buildable and meta.available():
        try:
            return (*_meta_order(ckpt), META, None)
        except Exception as e:   # a config transformers cannot build: say so, try the file's order
            tried = f"not on the meta device: {type(e).__name__}: {str(e)[:200]}"
    if not ckpt.ordered:
        why = (f"the {ckpt.format} file does not keep the model's parameter order"
               + ("" if meta.available() else f"; {meta.HINT.replace('compute it', 'build the model')}"))
        return None, None, NONE, why + (f" ({tried})" if tried else "")
    place, alias_of = placements(ckpt), aliases(ckpt)
    order = [(t.name, t.shape) for t in ckpt if place[t.name].role == "parameter" and t.name not in alias_of]
    return order, None, ORDER, tried


def _meta_order(ckpt: Checkpoint) -> tuple[list[Param], set[str]]:
    """named_parameters() of config.json's first architecture built on the meta device (each in the checkpoint
    under its name), and the names transformers' Trainer.get_decay_parameter_names leaves out."""
    order, nodecay = _built(json.dumps(ckpt.config, sort_keys=True, default=str))
    missing = next((n for n, _ in order if n not in ckpt.tensors), None)
    if missing is not None:
        raise LookupError(f"the model's parameter {missing} is not in the checkpoint")
    return order, nodecay


@functools.lru_cache(maxsize=4)   # a run's steps share one config: the model is built once
def _built(config_json: str) -> tuple[list[Param], set[str]]:
    import torch
    import transformers as T

    cfg = json.loads(config_json)
    arch = architectures(cfg)[0]
    cls = getattr(T, arch, None)
    if cls is None:
        raise LookupError(f"transformers {T.__version__} has no class {arch}")
    with meta.quiet(), torch.device("meta"):
        config = T.AutoConfig.for_model(**{k: v for k, v in cfg.items() if k != "auto_map"})
        model = cls._from_config(config)
        # the Trainer's own rule (its `self` is not used: no Trainer is built)
        decay = set(T.Trainer.get_decay_parameter_names(None, model))  # type: ignore[arg-type]
    order = [(n, tuple(p.shape)) for n, p in model.named_parameters()]
    return order, {n for n, _ in order if n not in decay}


def _split(ckpt: Checkpoint, groups: tuple[tuple[int, ...], ...], optimizers: int, order: list[Param] | None,
           nodecay: set[str] | None, why: str | None) -> tuple[list[list[Param]] | None, str | None]:
    """Each group's parameters in order, as the builder split them; (None, the reason) where that is unknown."""
    if order is None:
        return None, why
    if not order:
        return None, "the checkpoint holds no model parameter"
    if optimizers > 1:
        return None, f"{optimizers} optimizers: which parameters each was given is the training code's choice"
    if len(groups) == 1:
        return [order], None
    if ckpt.optimizer_builder == TRAINER and len(groups) == 2:
        def no(name: str) -> bool:
            return name in nodecay if nodecay is not None else bool(NO_DECAY.search(name.lower()))
        return [[p for p in order if not no(p[0])], [p for p in order if no(p[0])]], None
    return None, f"{len(groups)} param groups: which parameter is in which is the training code's choice"


def _state_shapes(ckpt: Checkpoint, state: str, indices: tuple[int, ...]) -> list[tuple[int, tuple[int, ...] | None]]:
    """Each index and the shape of its per-element state (None: no such state, e.g. never stepped)."""
    out: list[tuple[int, tuple[int, ...] | None]] = []
    for i in indices:
        t = next((ckpt.tensors[n] for s in SHAPED if (n := f"{state}.{i}.{s}") in ckpt.tensors), None)
        out.append((i, t.shape if t is not None else None))
    return out


def fit(states: list[tuple[int, tuple[int, ...] | None]], params: list[Param]) -> tuple[dict[int, str] | None, str | None]:
    """The one order-preserving assignment of the group's states to its parameters whose shapes all fit (parameters
    may be left out: frozen ones are not in the optimizer), and a note; (None, why) when there is none or several."""
    m, n = len(states), len(params)
    k = n - m
    if k < 0:
        return None, f"{m} states in the group, {n} parameters for it: the parameters do not fit"
    if not any(s is not None for _, s in states):
        return None, "no per-element state to check the parameters' shapes against"
    if m * (k + 1) > MAX_WORK:
        return None, f"{k} of {n} parameters not in the group: too many to search an assignment"

    def fits(i: int, j: int) -> bool:
        return states[i][1] is None or states[i][1] == params[j][1]
    # ways[i][d]: order-preserving assignments of states[i:] to params[i + d:] (at most 2 counted)
    ways = [[0] * (k + 1) for _ in range(m + 1)]
    ways[m] = [1] * (k + 1)
    for i in range(m - 1, -1, -1):
        for d in range(k, -1, -1):
            w = ways[i + 1][d] if fits(i, i + d) else 0
            ways[i][d] = min(2, w + (ways[i][d + 1] if d < k else 0))
    if ways[0][0] != 1:
        if ways[0][0] > 1:
            return None, (f"{k} of the {n} parameters are not in the group (frozen?) and parameters of equal shapes "
                          "allow more than one assignment")
        if k == 0:
            i = next(i for i in range(m) if not fits(i, i))
            return None, (f"state {states[i][0]} has shape {list(states[i][1] or ())}, its parameter {params[i][0]} "
                          f"{list(params[i][1])}: the order does not fit")
        return None, f"no order-preserving assignment of the {m} states to the {n} parameters fits their shapes"
    got, left, d = {}, [], 0
    for i in range(m):
        while not (fits(i, i + d) and ways[i + 1][d]):
            left.append(params[i + d][0])
            d += 1
        got[states[i][0]] = params[i + d][0]
    left += [p[0] for p in params[m + d:]]
    return got, (f"{len(left)} parameter(s) not in the group (requires_grad False?): {', '.join(left[:5])}"
                 + (", ..." if len(left) > 5 else "")) if left else None
