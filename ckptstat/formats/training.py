"""Training libraries' checkpoints read as a whole: the model apart from the optimizer state, the step and learning
rate said (docs/training.md).

- Hugging Face Trainer `checkpoint-N/` (transformers trainer.py `_save_checkpoint`): the model as save_pretrained
  writes it, `optimizer.pt` (OPTIMIZER_NAME: torch.save of `optimizer.state_dict()`), `scheduler.pt`,
  `rng_state*.pth`, `training_args.bin`, and `trainer_state.json` (TRAINER_STATE_NAME: TrainerState's
  `global_step`, `epoch`, `log_history` whose entries carry the logged `learning_rate`). Read: the model, and the
  optimizer's tensors under `optimizer.`; the step and epoch from trainer_state.json, the learning rate from the
  last log_history entry holding one, else the optimizer's first param group.
- DeepSpeed `global_stepN/` (deepspeed/runtime/engine.py `save_checkpoint`, its `latest` file naming the tag):
  `mp_rank_XX_model_states.pt` (a dict: `module` the model's state_dict, `optimizer` without ZeRO, `global_steps`,
  `ds_version`...) and with ZeRO `*_optim_states.pt` (`optimizer_state_dict`: `base_optimizer_state`, the torch
  optimizer's state over flattened fp32 partitions, `single_partition_of_fp32_groups`). A run folder with
  `latest` opens the tag it names.
- PyTorch Lightning `.ckpt` (lightning/pytorch/trainer/connectors/checkpoint_connector.py `dump_checkpoint`): one
  torch.save of a dict: `epoch`, `global_step`, `pytorch-lightning_version`, `state_dict`, `optimizer_states` (a
  list of optimizer state_dicts), `lr_schedulers` (their state_dicts, `_last_lr`). Read by the torch reader, which
  asks `torch_training` for what the dict says.

A torch optimizer's state_dict (torch/optim/optimizer.py `state_dict`) is `{"state": {index: {...}}, "param_groups":
[{"lr": ..., "params": [index...], "param_names": [name...]}]}`; `param_names` is there when the optimizer was built
from `named_parameters()` (torch >= 2.6), and then names each index's parameter (Checkpoint.optimizer_params)."""
from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

from ..core import Checkpoint
from ..core.files import open_regular
from ..errors import CorruptCheckpointError, FileNotFound

TRAINER_STATE = "trainer_state.json"     # transformers trainer_callback.py / trainer.py TRAINER_STATE_NAME
TRAINER_OPTIMIZER = "optimizer.pt"       # transformers trainer.py OPTIMIZER_NAME
DEEPSPEED_LATEST = "latest"              # deepspeed engine.py: the tag of the last save
_DS_MODEL = re.compile(r"^(?:zero_pp_rank_\d+_)?mp_rank_(\d+)_model_states\.pt$")
_DS_OPTIM = re.compile(r"^.*_optim_states\.pt$")
_DS_TAG = re.compile(r"^[\w.+-]{1,200}$")
MAX_DEPTH = 6   # how deep an optimizer state_dict is looked for in a training dict
STATE_BYTES = 64 << 20


def _number(v: Any) -> float | int | None:
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def optimizer_dicts(obj: Any, prefix: str = "", depth: int = 0) -> Iterator[tuple[str, dict[Any, Any]]]:
    """(name prefix, dict) of each torch optimizer state_dict in a torch.save'd object, as the torch reader names
    its tensors (`optimizer_states.0` + `.state.3.exp_avg`)."""
    if depth > MAX_DEPTH:
        return
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
            yield from optimizer_dicts(v, f"{prefix}.{k}" if prefix else str(k), depth + 1)


def optimizer_facts(obj: Any) -> tuple[float | None, dict[str, str]]:
    """(the first param group's learning rate, state prefix -> parameter name from `param_names`)."""
    lr, names = None, {}
    for prefix, d in optimizer_dicts(obj):
        for g in d["param_groups"]:
            if not isinstance(g, dict):
                continue
            if lr is None:
                lr = _number(g.get("lr"))
            params, pnames = g.get("params"), g.get("param_names")
            if isinstance(params, list) and isinstance(pnames, list) and len(params) == len(pnames):
                for i, n in zip(params, pnames):
                    if isinstance(n, str) and isinstance(i, int):
                        names[f"{prefix}.state.{i}" if prefix else f"state.{i}"] = n
    return lr, names


def torch_training(obj: Any) -> tuple[dict[str, Any] | None, dict[str, str]]:
    """What a torch.save'd dict says of its training (Lightning's .ckpt, DeepSpeed's model states, a bare optimizer
    state_dict), and the parameter names of its optimizer state; (None, {}) for a plain state_dict."""
    lr, names = optimizer_facts(obj)
    if not isinstance(obj, dict):
        return None, names
    info: dict[str, Any] | None = None
    if "pytorch-lightning_version" in obj:
        info = {"library": f"PyTorch Lightning {str(obj['pytorch-lightning_version'])[:40]}",
                "global_step": _number(obj.get("global_step")), "epoch": _number(obj.get("epoch"))}
        scheds = obj.get("lr_schedulers")
        last = scheds[0].get("_last_lr") if isinstance(scheds, list) and scheds and isinstance(scheds[0], dict) else None
        if isinstance(last, list) and last and _number(last[0]) is not None:
            lr = last[0]
    elif "ds_version" in obj and "module" in obj:
        info = {"library": f"DeepSpeed {str(obj['ds_version'])[:40]}", "global_step": _number(obj.get("global_steps")),
                "epoch": None}
    elif "ds_version" in obj and "optimizer_state_dict" in obj:
        info = {"library": f"DeepSpeed {str(obj['ds_version'])[:40]} (optimizer state)", "global_step": None, "epoch": None}
    elif lr is not None:
        info = {"library": "torch optimizer state_dict", "global_step": None, "epoch": None}
    if info is not None:
        info["learning_rate"] = lr
    return info, names


# ------------------------------------------------------------------------------------------ folders
def is_training_folder(path: str) -> bool:
    return os.path.isdir(path) and (os.path.isfile(os.path.join(path, TRAINER_STATE)) or _deepspeed_files(path) is not None
                                    or os.path.isfile(os.path.join(path, DEEPSPEED_LATEST)))


def _deepspeed_files(folder: str) -> tuple[list[str], list[str]] | None:
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return None
    model = [n for n in names if _DS_MODEL.match(n)]
    return (model, [n for n in names if _DS_OPTIM.match(n)]) if model else None


def _merged(base: Checkpoint, part: Checkpoint, prefix: str) -> None:
    """`part`'s tensors into `base` under `prefix` (its optimizer names and readers with them)."""
    for name, t in part.tensors.items():
        new = f"{prefix}{name}"
        if new in base.tensors:
            raise CorruptCheckpointError(part.path, f"tensor {new!r} is also in {base.path}")
        base.tensors[new] = replace(t, name=new)
    base.optimizer_params.update({f"{prefix}{k}": v for k, v in part.optimizer_params.items()})
    base.readers.update(part.readers)
    base.files += tuple(f for f in part.files if f not in base.files)
    base.notes += part.notes
    base.distinct = False
    base.memo.clear()


def open_folder(folder: str, open_file: Callable[[str], Checkpoint], resolve: Callable[[str], str],
                read_json: Callable[[str], Any]) -> Checkpoint | None:
    """A Trainer or DeepSpeed folder as one Checkpoint; None for any other folder. `open_file` opens one file as
    open_checkpoint does; `resolve` picks a model folder's weights file; `read_json` reads a bounded JSON file."""
    if os.path.isfile(os.path.join(folder, TRAINER_STATE)):
        return _trainer(folder, open_file, resolve, read_json)
    ds = _deepspeed_files(folder)
    if ds is None and os.path.isfile(os.path.join(folder, DEEPSPEED_LATEST)):
        tag = _latest(folder)
        sub = os.path.join(folder, tag)
        ds = _deepspeed_files(sub)
        if ds is None:
            raise FileNotFound(sub, f"{DEEPSPEED_LATEST} names tag {tag!r}, which holds no mp_rank_*_model_states.pt")
        folder = sub
    return None if ds is None else _deepspeed(folder, ds, open_file)


def _latest(folder: str) -> str:
    p = os.path.join(folder, DEEPSPEED_LATEST)
    with open_regular(p) as f:
        tag = f.read(256).decode("utf-8", "replace").strip()
    if not _DS_TAG.match(tag) or tag in (".", ".."):
        raise CorruptCheckpointError(p, f"not a DeepSpeed tag (a folder name): {tag[:60]!r}")
    return tag


def _trainer(folder: str, open_file: Callable[[str], Checkpoint], resolve: Callable[[str], str],
             read_json: Callable[[str], Any]) -> Checkpoint:
    state_path = os.path.join(folder, TRAINER_STATE)
    state = read_json(state_path)
    if not isinstance(state, dict):
        raise CorruptCheckpointError(state_path, "trainer state is not a JSON object")
    ckpt = open_file(resolve(folder))
    opt_path = os.path.join(folder, TRAINER_OPTIMIZER)
    lr = None
    if os.path.isfile(opt_path):
        opt = open_file(opt_path)
        _merged(ckpt, opt, "optimizer.")
        lr = (opt.training or {}).get("learning_rate")
    logged = [e["learning_rate"] for e in state.get("log_history") or [] if isinstance(e, dict)
              and _number(e.get("learning_rate")) is not None]
    ckpt.training = {"library": "Hugging Face Trainer", "global_step": _number(state.get("global_step")),
                     "epoch": _number(state.get("epoch")), "learning_rate": logged[-1] if logged else lr,
                     "learning_rate_from": "trainer_state.json log_history" if logged else
                     "optimizer.pt param_groups" if lr is not None else None,
                     "optimizer": opt_path if os.path.isfile(opt_path) else None}
    ckpt.path = folder
    return ckpt


def _deepspeed(folder: str, ds: tuple[list[str], list[str]], open_file: Callable[[str], Checkpoint]) -> Checkpoint:
    model_files, optim_files = ds
    ckpt = open_file(os.path.join(folder, model_files[0]))
    for n in model_files[1:]:   # model-parallel ranks: each its own slice of the model
        _merged(ckpt, open_file(os.path.join(folder, n)), f"{n.removesuffix('_model_states.pt')}.")
    info = dict(ckpt.training or {"library": "DeepSpeed", "global_step": None, "epoch": None, "learning_rate": None})
    for n in optim_files:
        part = open_file(os.path.join(folder, n))
        _merged(ckpt, part, "" if len(optim_files) == 1 else f"{n.removesuffix('_optim_states.pt')}.")
        if info.get("learning_rate") is None:
            info["learning_rate"] = (part.training or {}).get("learning_rate")
    m = re.search(r"(\d+)$", os.path.basename(os.path.normpath(folder)))
    if info.get("global_step") is None and m:
        info["global_step"] = int(m.group(1))
    info["optimizer"] = [os.path.join(folder, n) for n in optim_files] or None
    ckpt.training = info
    ckpt.path = folder
    return ckpt
