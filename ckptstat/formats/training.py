"""Training libraries' checkpoints read as a whole: the model apart from the optimizer state, the step and learning
rate said (docs/training.md).

- Hugging Face Trainer `checkpoint-N/` (transformers trainer.py `_save_checkpoint`): the model as save_pretrained
  writes it, `optimizer.pt` (OPTIMIZER_NAME: torch.save of `optimizer.state_dict()`), `scheduler.pt`,
  `rng_state*.pth`, `training_args.bin`, and `trainer_state.json` (TRAINER_STATE_NAME: TrainerState's
  `global_step`, `epoch`, `log_history` whose entries carry the logged `learning_rate`). Read: the model, and the
  optimizer's tensors under `optimizer.`; the step and epoch from trainer_state.json, the learning rate from the
  last log_history entry holding one, else the optimizer's first param group.
  With FSDP and a sharded state dict (accelerate/utils/fsdp_utils.py `save_fsdp_model`, `save_fsdp_optimizer`,
  which the Trainer calls) the model and optimizer are DCP folders instead: `pytorch_model_fsdp_<i>/` (`{"model":
  state_dict}`: names `model.<parameter>`) and `optimizer_<i>/` (`{"optimizer": optimizer state}`: names
  `optimizer.state.<parameter>.exp_avg`, `optimizer.param_groups.0.lr`), read by formats/dcp/.
- DeepSpeed `global_stepN/` (deepspeed/runtime/engine.py `save_checkpoint`, its `latest` file naming the tag):
  `mp_rank_XX_model_states.pt` (a dict: `module` the model's state_dict, `optimizer` without ZeRO, `global_steps`,
  `ds_version`...) and with ZeRO `*_optim_states.pt` (`optimizer_state_dict`: `base_optimizer_state`, the torch
  optimizer's state over flattened fp32 partitions, `single_partition_of_fp32_groups`). ZeRO-3 partitions the model
  too: `zero_pp_rank_R_mp_rank_00_model_states.pt` per rank, its parameters gathered from the ranks' fp32 partitions
  by formats/deepspeed_zero3.py. A run folder with `latest` opens the tag it names.
- accelerate `Accelerator.save_state(folder)` (accelerate/checkpointing.py `save_accelerator_state`, utils/constants.py):
  the model as `model.safetensors` (or `pytorch_model.bin`), `optimizer.bin` (torch.save of the optimizer's
  state_dict), `scheduler.bin`, `random_states_<process>.pkl`, `sampler.bin`; a second model or optimizer as
  `model_1...`, `optimizer_1.bin`. Read: the first model and `optimizer.bin` under `optimizer.`, the learning rate
  from its first param group; no step (accelerate saves none: the folder's name, `checkpoint_<i>`, counts saves).
- PyTorch Lightning `.ckpt`: one torch.save'd dict, read by the torch reader (formats/torch/training.py says what
  the dict holds: step, epoch, learning rate, the optimizer state's parameter names)."""
from __future__ import annotations

import os
import re
from collections.abc import Callable, Collection
from dataclasses import replace
from typing import Any

from ..core import Checkpoint
from ..core.files import check_inside, open_regular
from ..core.limits import limits
from ..errors import CheckpointError, CorruptCheckpointError, FileNotFound, reading, short_text
from .configs import read_json
from .deepspeed_zero3 import gather, is_zero3, part_prefix
from .registry import _FOLDER_HOOKS, FOLDER_CANDIDATES, resolve_folder
from .torch.training import DeepSpeedUnpickler, number
from .torch.values import flat, row

DCP_METADATA = ".metadata"               # formats/dcp/ METADATA (not imported: a Trainer folder without FSDP needs no DCP)

TRAINER_STATE = "trainer_state.json"     # transformers trainer_callback.py / trainer.py TRAINER_STATE_NAME
TRAINER_OPTIMIZER = "optimizer.pt"       # transformers trainer.py OPTIMIZER_NAME
# transformers trainer.py SCHEDULER_NAME, TRAINING_ARGS_NAME: beside optimizer.pt they mark a Trainer folder whose
# trainer_state.json is missing (rng_state*.pth is not enough: other loops save one)
TRAINING_ARGS = "training_args.bin"
TRAINER_SIDE = ("scheduler.pt", TRAINING_ARGS)
ACCELERATE_OPTIMIZER = "optimizer.bin"   # accelerate utils/constants.py OPTIMIZER_NAME + ".bin"
_ACCELERATE_SIDE = re.compile(r"^(?:scheduler(?:_\d+)?\.bin|sampler(?:_\d+)?\.bin|random_states_\d+\.pkl)$")
_CHECKPOINT_N = re.compile(r"^checkpoint-(\d+)$")   # transformers trainer_utils.py PREFIX_CHECKPOINT_DIR
DEEPSPEED_LATEST = "latest"              # deepspeed engine.py: the tag of the last save
_DS_MODEL = re.compile(r"^(?:zero_pp_rank_\d+_)?mp_rank_(\d+)_model_states\.pt$")
_DS_OPTIM = re.compile(r"^.*_optim_states\.pt$")
_DS_TAG = re.compile(r"^[\w.+-]{1,200}$")
# accelerate utils/constants.py FSDP_MODEL_NAME, OPTIMIZER_NAME; fsdp_utils.py adds `_<index>` for DCP folders
_FSDP_MODEL = re.compile(r"^pytorch_model_fsdp_(\d+)$")
_FSDP_OPTIM = re.compile(r"^optimizer_(\d+)$")


# ------------------------------------------------------------------------------------------ folders
def _deepspeed_files(folder: str) -> tuple[list[str], list[str]] | None:
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return None
    model = [n for n in names if _DS_MODEL.match(n)]
    return (model, [n for n in names if _DS_OPTIM.match(n)]) if model else None


def merge_under(base: Checkpoint, part: Checkpoint, prefix: str) -> None:
    """`part`'s tensors into `base` under `prefix` (its optimizer names and readers with them)."""
    tensors = base.editable()
    for name, t in part.tensors.items():
        new = f"{prefix}{name}"
        if new in tensors:
            raise CorruptCheckpointError(part.path, f"tensor {new!r} is also in {base.path}")
        tensors[new] = replace(t, name=new)
    base.optimizer_params.update({f"{prefix}{k}": v for k, v in part.optimizer_params.items()})
    base.optimizer_fragments.update({f"{prefix}{k}": v for k, v in part.optimizer_fragments.items()})
    base.optimizer_groups.update({f"{prefix}{k}": v for k, v in part.optimizer_groups.items()})
    base.objects.update({f"{prefix}{k}": v for k, v in part.objects.items()})
    base.readers.update(part.readers)
    base.files += tuple(f for f in part.files if f not in base.files)
    base.notes += part.notes
    base.distinct = False


def trainer_folder(names: Collection[str]) -> bool:
    """Whether a folder holding `names` (its files and subfolders) is a Trainer checkpoint: trainer_state.json, or
    optimizer.pt with scheduler.pt or training_args.bin beside the model's weights (save_pretrained's file, or an
    FSDP run's model folder)."""
    if TRAINER_STATE in names:
        return True
    weights = any(n in FOLDER_CANDIDATES or _FSDP_MODEL.match(n) for n in names)
    return TRAINER_OPTIMIZER in names and any(n in names for n in TRAINER_SIDE) and weights


def accelerate_folder(names: Collection[str]) -> bool:
    """Whether a folder holding `names` is an accelerate save_state folder: optimizer.bin beside the model's weights
    and a scheduler, sampler or random-states file."""
    return ACCELERATE_OPTIMIZER in names and any(map(_ACCELERATE_SIDE.match, names)) and \
        any(n in FOLDER_CANDIDATES for n in names)


def open_folder(folder: str, open_file: Callable[[str], Checkpoint]) -> Checkpoint | None:
    """A Trainer, accelerate or DeepSpeed folder as one Checkpoint; None for any other folder. `open_file` opens one
    file as open_checkpoint does (registry._FOLDER_HOOKS)."""
    try:
        names = set(os.listdir(folder))
    except OSError:
        return None
    if trainer_folder(names):
        return _trainer(folder, open_file)
    if accelerate_folder(names):
        return _accelerate(folder, names, open_file)
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
    check_inside(p, "file", folder)   # (its text is shown when it is no tag: never an outside file's)
    with open_regular(p) as f:
        tag = f.read(256).decode("utf-8", "replace").strip()
    if not _DS_TAG.match(tag) or tag in (".", ".."):
        raise CorruptCheckpointError(p, f"not a DeepSpeed tag (a folder name): {tag[:60]!r}")
    return tag


def _trainer(folder: str, open_file: Callable[[str], Checkpoint]) -> Checkpoint:
    state_path = os.path.join(folder, TRAINER_STATE)
    state: Any = {}
    if os.path.isfile(state_path):
        with reading(state_path, "cannot read trainer state"):
            state = read_json(state_path, limits().config_bytes, "trainer state")
        if not isinstance(state, dict):
            raise CorruptCheckpointError(state_path, "trainer state is not a JSON object")
    else:   # the step from the folder's name, as the Trainer names it (checkpoint-500)
        m = _CHECKPOINT_N.match(os.path.basename(os.path.normpath(folder)))
        state = {"global_step": int(m.group(1))} if m else {}
    fsdp = _fsdp_folders(folder)
    if fsdp is not None:
        ckpt, opt_path, lr = _fsdp(fsdp, open_file)
        lr_from = f"{os.path.basename(opt_path)} param_groups" if opt_path else ""
    else:
        opt_path, lr_from = os.path.join(folder, TRAINER_OPTIMIZER), "optimizer.pt param_groups"
        ckpt, lr = _with_optimizer(folder, opt_path, open_file)
        if os.path.isfile(opt_path):
            ckpt.optimizer_builder = "transformers Trainer"   # its create_optimizer, unless the run passed its own
    # the learning rate logged at this checkpoint's step; one logged at an earlier step (logging_steps larger than
    # save_steps) is stale, and the optimizer's is taken instead
    logged = [e["learning_rate"] for e in state.get("log_history") or [] if isinstance(e, dict)
              and number(e.get("learning_rate")) is not None and e.get("step") == state.get("global_step")]
    ckpt.training = {"library": "Hugging Face Trainer", "global_step": number(state.get("global_step")),
                     "epoch": number(state.get("epoch")), "learning_rate": logged[-1] if logged else lr,
                     "learning_rate_from": "trainer_state.json log_history" if logged else
                     lr_from if lr is not None else None,
                     "optimizer": opt_path if opt_path and os.path.exists(opt_path) else None}
    if os.path.isfile(state_path):   # its values (best_metric, total_flos, a callback's state), log_history aside
        ckpt.objects.update({n: row(TRAINER_STATE, v) for n, v in
                             flat("trainer_state", {k: v for k, v in state.items() if k != "log_history"})})
    _training_args(ckpt, os.path.join(folder, TRAINING_ARGS), open_file)
    if not os.path.isfile(state_path):
        side = " / ".join(n for n in TRAINER_SIDE if os.path.isfile(os.path.join(folder, n)))
        ckpt.notes.append(f"no {TRAINER_STATE}: a Trainer folder by its {TRAINER_OPTIMIZER} and {side}; "
                          + ("the step from the folder's name, no epoch" if state else "no step or epoch"))
    ckpt.path = folder
    return ckpt


def _with_optimizer(folder: str, opt_path: str, open_file: Callable[[str], Checkpoint]) -> tuple[Checkpoint, Any]:
    """The folder's model with the optimizer state at `opt_path` (where it is) under `optimizer.`, and the learning
    rate of its first param group (None without it)."""
    ckpt = open_file(resolve_folder(folder))
    if not os.path.isfile(opt_path):
        return ckpt, None
    opt = open_file(opt_path)
    merge_under(ckpt, opt, "optimizer.")
    return ckpt, (opt.training or {}).get("learning_rate")


def _accelerate(folder: str, names: set[str], open_file: Callable[[str], Checkpoint]) -> Checkpoint:
    opt_path = os.path.join(folder, ACCELERATE_OPTIMIZER)
    ckpt, lr = _with_optimizer(folder, opt_path, open_file)
    ckpt.training = {"library": "accelerate Accelerator.save_state", "global_step": None, "epoch": None,
                     "learning_rate": lr, "learning_rate_from": f"{ACCELERATE_OPTIMIZER} param_groups" if lr is not None
                     else None, "optimizer": opt_path}
    # accelerate names the i-th model model_i.safetensors, or pytorch_model_i.bin (safe_serialization=False)
    more = sorted(n for n in names if re.fullmatch(r"(?:model|optimizer|pytorch_model)_\d+\.(?:safetensors|bin)", n))
    if more:
        ckpt.notes.append(f"accelerate saved more than one model or optimizer ({', '.join(more[:4])}): the first of "
                          "each is read; open the others by name")
    ckpt.path = folder
    return ckpt


def _training_args(ckpt: Checkpoint, path: str, open_file: Callable[[str], Checkpoint]) -> None:
    """The run's arguments (training_args.bin: TrainingArguments pickled whole, read as values, formats/torch
    data_classes.py) into `objects` under `training_args.`; one the reader refuses (a lab's own class, a payload) is
    said in a note, and the folder read without it."""
    if not os.path.isfile(path):
        return
    try:
        args = open_file(path)
    except CheckpointError as e:
        ckpt.notes.append(f"{TRAINING_ARGS} not read: {short_text(e)}")
        return
    ckpt.objects.update({f"training_args.{k}": v for k, v in args.objects.items()})
    ckpt.files += (path,)


def _fsdp_folders(folder: str) -> tuple[list[str], list[str]] | None:
    """The DCP folders of an FSDP Trainer checkpoint, models and optimizers, by index; None when there is none."""
    def dcp_folders(pattern: re.Pattern[str]) -> list[str]:
        found = [(int(m.group(1)), n) for n in names if (m := pattern.match(n))
                 and os.path.isfile(os.path.join(folder, n, DCP_METADATA))]
        return [os.path.join(folder, n) for _, n in sorted(found)]
    try:
        names = os.listdir(folder)
    except OSError:
        return None
    models = dcp_folders(_FSDP_MODEL)
    return (models, dcp_folders(_FSDP_OPTIM)) if models else None


def _fsdp(folders: tuple[list[str], list[str]], open_file: Callable[[str], Checkpoint]) -> tuple[Checkpoint, str, Any]:
    """The model DCP folders (the first as is, any other under its folder's name) with the optimizer ones merged
    (their names already start with `optimizer.`; any after the first under its folder's name), the first
    optimizer's path and its param_groups' learning rate."""
    models, optims = folders
    ckpt = open_file(os.path.join(models[0], DCP_METADATA))
    ckpt.training = None   # the folder's training record is the Trainer's (a model folder has no step of its own)
    lr = None
    for sub in [*models[1:], *optims]:
        part = open_file(os.path.join(sub, DCP_METADATA))
        merge_under(ckpt, part, "" if sub == (optims or [""])[0] else f"{os.path.basename(sub)}.")
        if lr is None and sub in optims:
            lr = (part.training or {}).get("learning_rate")
    return ckpt, optims[0] if optims else "", lr


def _deepspeed(folder: str, ds: tuple[list[str], list[str]], open_file: Callable[[str], Checkpoint]) -> Checkpoint:
    model_files, optim_files = ds
    zero3 = is_zero3(model_files)   # one model states file per data-parallel rank, the parameters partitioned
    ckpt = open_file(os.path.join(folder, model_files[0]))
    for n in [] if zero3 else model_files[1:]:   # model-parallel ranks: each its own slice of the model
        merge_under(ckpt, open_file(os.path.join(folder, n)), f"{n.removesuffix('_model_states.pt')}.")
    info = dict(ckpt.training or {"library": "DeepSpeed", "global_step": None, "epoch": None, "learning_rate": None})
    from .torch.reader import open_zip  # (the torch reader imports this module)

    for n in optim_files:
        with reading(os.path.join(folder, n)):
            part = open_zip(os.path.join(folder, n), DeepSpeedUnpickler)
        merge_under(ckpt, part, part_prefix(n, len(optim_files)))
        if info.get("learning_rate") is None:
            info["learning_rate"] = (part.training or {}).get("learning_rate")
    if zero3:
        gather(ckpt, folder, model_files, optim_files, open_file)
    m = re.search(r"(\d+)$", os.path.basename(os.path.normpath(folder)))
    if info.get("global_step") is None and m:
        info["global_step"] = int(m.group(1))
    info["optimizer"] = [os.path.join(folder, n) for n in optim_files] or None
    ckpt.training = info
    ckpt.path = folder
    return ckpt


_FOLDER_HOOKS.append(open_folder)
