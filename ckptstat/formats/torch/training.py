"""What a torch.save'd training dict says of its run, read from the object the torch reader unpickled (docs/training.md).

- PyTorch Lightning `.ckpt` (lightning/pytorch/trainer/connectors/checkpoint_connector.py `dump_checkpoint`): `epoch`,
  `global_step`, `pytorch-lightning_version`, `state_dict`, `optimizer_states` (a list of optimizer state_dicts),
  `lr_schedulers` (their state_dicts, `_last_lr`), `callbacks`, `loops`.
- DeepSpeed (deepspeed/runtime/engine.py `_save_checkpoint`, `_save_zero_checkpoint`): `mp_rank_XX_model_states.pt`
  holds `module`, `optimizer` (without ZeRO), `global_steps`, `ds_version`; a ZeRO `*_optim_states.pt` holds
  `optimizer_state_dict` (`base_optimizer_state`: the torch optimizer's state over flat fp32 partitions) and
  `ds_version`, and names DeepSpeed classes (DeepSpeedUnpickler records them).
- a torch optimizer's state_dict (torch/optim/optimizer.py `state_dict`): `{"state": {index: {...}}, "param_groups":
  [{"lr": ..., "params": [index...], "param_names": [name...]}]}`; `param_names` is there when the optimizer was
  built from `named_parameters()` (torch >= 2.6), and then names each index's parameter (Checkpoint.optimizer_params);
  otherwise each group's `params` index lists are kept (Checkpoint.optimizer_groups) for the analyses to map
  (analysis/optimizer_names.py).
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .unpickler import Record, RecordingUnpickler, key_text

MAX_DEPTH = 6   # how deep an optimizer state_dict is looked for in a training dict


class DeepSpeedUnpickler(RecordingUnpickler):
    """A ZeRO `*_optim_states.pt` pickle names DeepSpeed classes beyond torch's weights_only allowlist (DeepSpeed
    loads it with weights_only=False): its loss scaler (deepspeed/runtime/fp16/loss_scaler.py), each parameter's
    slice of the flat partition (deepspeed/utils/tensor_fragment.py fragment_address) and the stage, an Enum of ints
    (deepspeed/runtime/zero/config.py ZeroStageEnum). Recorded, never imported; training scripts' plain data is read as
    the torch reader reads it (data_classes.py), and a call or build of any other global is refused."""

    CLASSES = frozenset({"deepspeed.runtime.fp16.loss_scaler.LossScaler",
                         "deepspeed.runtime.fp16.loss_scaler.DynamicLossScaler",
                         "deepspeed.utils.tensor_fragment.fragment_address"})
    CALLS = {"deepspeed.runtime.zero.config.ZeroStageEnum": lambda value=0: value}
    WHAT = "a DeepSpeed optimizer-state class"


def number(v: Any) -> float | int | None:
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


# The names whose plain number says the run's step, epoch and learning rate, in a training dict a script saves
# (`{"model": ..., "optimizer": ..., "step": 500, "epoch": 2}`; nanoGPT's `iter_num`) and in a DCP folder's items
# (formats/dcp/objects.py; Megatron-LM's `iteration`, in a Megatron-Core checkpoint's common.pt).
TRAINING_KEYS = {"global_step": ("step", "global_step", "steps", "iteration", "iter_num"), "epoch": ("epoch",),
                 "learning_rate": ("lr", "learning_rate")}


def _first(obj: dict[Any, Any], field: str) -> float | int | None:
    return next((v for k in TRAINING_KEYS[field] if (v := number(obj.get(k))) is not None), None)


def optimizer_dicts(obj: Any, prefix: str = "", depth: int = 0,
                    seen: set[int] | None = None) -> Iterator[tuple[str, dict[Any, Any]]]:
    """(name prefix, dict) of each torch optimizer state_dict in a torch.save'd object, as the torch reader names
    its tensors (`optimizer_states.0` + `.state.3.exp_avg`). Each container once (as the reader's walk): a pickle's
    memo can put one list in another a million times."""
    seen = set() if seen is None else seen
    if depth > MAX_DEPTH or id(obj) in seen:
        return
    if isinstance(obj, (dict, list, tuple)):
        seen.add(id(obj))
    if isinstance(obj, dict):
        if isinstance(obj.get("state"), dict) and isinstance(obj.get("param_groups"), list):
            yield prefix, obj
            return
        items: Any = obj.items()
    elif isinstance(obj, (list, tuple)):
        items = enumerate(obj)
    else:
        return
    for k, v in items:
        if isinstance(k, (str, int)) and not isinstance(k, bool):
            yield from optimizer_dicts(v, f"{prefix}.{key_text(k)}" if prefix else key_text(k), depth + 1, seen)


Groups = dict[str, tuple[tuple[int, ...], ...]]


def optimizer_facts(obj: Any) -> tuple[float | None, dict[str, str], Groups]:
    """(the first param group's learning rate, state prefix -> parameter name from `param_names`, and for each
    optimizer whose groups do not name their parameters its state's prefix (`optimizer_states.0.state`) -> each param
    group's `params` indices)."""
    lr, names, groups = None, {}, {}
    seen: set[int] = set()
    for prefix, d in optimizer_dicts(obj):
        state = f"{prefix}.state" if prefix else "state"
        indices: list[tuple[int, ...]] = []
        for g in d["param_groups"]:
            if not isinstance(g, dict) or id(g) in seen:   # (one group a million times over: once)
                indices = []
                break
            seen.add(id(g))
            if lr is None:
                lr = number(g.get("lr"))
            params, pnames = g.get("params"), g.get("param_names")
            if isinstance(params, list) and isinstance(pnames, list) and len(params) == len(pnames):
                for i, n in zip(params, pnames):
                    if isinstance(n, str) and isinstance(i, int):
                        names[f"{state}.{i}"] = n
            elif isinstance(params, list) and all(type(i) is int for i in params):
                indices.append(tuple(params))
        if indices and len(indices) == len(d["param_groups"]):
            groups[state] = tuple(indices)
    return lr, names, groups


Fragments = dict[str, tuple[tuple[str, int, int], ...]]


def zero_fragments(obj: Any) -> Fragments:
    """A ZeRO optimizer state's flat partition per param group -> (parameter, start, elements) of each parameter's
    slice in it: `optimizer_state_dict.param_slice_mappings[g]`, an ordered map of names to fragment_address(numel,
    start) (deepspeed/runtime/zero/stage_1_and_2.py `_create_param_mapping`)."""
    osd = obj.get("optimizer_state_dict") if isinstance(obj, dict) else None
    maps = osd.get("param_slice_mappings") if isinstance(osd, dict) else None
    out: Fragments = {}
    seen: set[int] = set()
    for g, m in enumerate(maps if isinstance(maps, list) else []):
        if id(m) in seen:   # (one map a million times over: once)
            continue
        seen.add(id(m))
        frags = []
        for name, addr in (m.items() if isinstance(m, dict) else ()):
            state = addr.state if isinstance(addr, Record) and addr.kind == "fragment_address" else None
            start, numel = (state.get("start"), state.get("numel")) if isinstance(state, dict) else (None, None)
            if isinstance(name, str) and type(start) is int and type(numel) is int and start >= 0 and numel >= 0:
                frags.append((name, start, numel))
        if frags:
            out[f"optimizer_state_dict.base_optimizer_state.state.{g}"] = tuple(frags)
    return out


def torch_training(obj: Any) -> tuple[dict[str, Any] | None, dict[str, str], Groups]:
    """What a torch.save'd dict says of its training (Lightning's .ckpt, DeepSpeed's model states, a bare optimizer
    state_dict), the parameter names of its optimizer state and its unnamed param groups (optimizer_facts);
    (None, {}, {}) for a plain state_dict."""
    lr, names, groups = optimizer_facts(obj)
    if not isinstance(obj, dict):
        return None, names, groups
    info: dict[str, Any] | None = None
    if "pytorch-lightning_version" in obj:
        info = {"library": f"PyTorch Lightning {str(obj['pytorch-lightning_version'])[:40]}",
                "global_step": number(obj.get("global_step")), "epoch": number(obj.get("epoch"))}
        scheds = obj.get("lr_schedulers")
        last = scheds[0].get("_last_lr") if isinstance(scheds, list) and scheds and isinstance(scheds[0], dict) else None
        if isinstance(last, list) and last and number(last[0]) is not None:
            lr = last[0]
    elif "ds_version" in obj and "module" in obj:
        info = {"library": f"DeepSpeed {str(obj['ds_version'])[:40]}", "global_step": number(obj.get("global_steps")),
                "epoch": None}
    elif "ds_version" in obj and "optimizer_state_dict" in obj:
        info = {"library": f"DeepSpeed {str(obj['ds_version'])[:40]} (optimizer state)", "global_step": None, "epoch": None}
    elif lr is not None or _first(obj, "global_step") is not None:   # a script's own training dict, or an optimizer's
        info = {"library": "torch optimizer state_dict" if "param_groups" in obj else "torch.save'd training dict",
                "global_step": _first(obj, "global_step"), "epoch": _first(obj, "epoch")}
    if info is not None:
        info["learning_rate"] = lr
    return info, names, groups
