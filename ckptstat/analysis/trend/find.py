"""`ckptstat trend`: the checkpoints of a training run, each with its step, in step order.

A run folder is read by the layouts training libraries write (docs/training.md):
- Hugging Face Trainer: `checkpoint-N/` folders (transformers trainer_utils.PREFIX_CHECKPOINT_DIR), step N;
- DeepSpeed: `global_stepN/` folders (deepspeed engine.save_checkpoint's default tag), step N;
- PyTorch Lightning: `*.ckpt` files, the step from ModelCheckpoint's default name `epoch=E-step=N.ckpt`;
  a file without `step=` in its name (`last.ckpt`) is left out, said in `skipped`;
- anything else: files or folders whose name ends in a number (`step_N`, `step-N`, `ckpt_N.pt`, `N.safetensors`),
  that number being the step.
The first layout found is the run's (a Trainer run folder also holds runs/, logs...). Checkpoints given one by one
are ordered by the number ending each name when every name has one (a shell glob sorts step_10 before step_2; a
file whose name has none, checkpoint-10/model.safetensors or step_10/.metadata, by its folder's), else kept in the
order given, the step being the position."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass

from ...core.files import absent
from ...errors import FileNotFound, UsageError

MAX_STEPS = 10_000   # a folder of more checkpoints than this is refused (each is opened)
_LAYOUTS: tuple[tuple[str, re.Pattern[str] | None, bool | None], ...] = (   # (what, pattern on a child's name,
    # whether it must be a folder)
    ("Hugging Face Trainer checkpoint-N/", re.compile(r"^checkpoint-(\d+)$"), True),
    ("DeepSpeed global_stepN/", re.compile(r"^global_step(\d+)$"), True),
    ("Lightning *.ckpt (step=N)", re.compile(r"(?:^|[-_])step=(\d+)(?:[-_.].*)?\.ckpt$"), False),
    ("numbered checkpoints", None, None),   # the number ending the name before its extensions (_number)
)
_WEIGHTS = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".gguf", ".h5", ".npz", ".msgpack", ".onnx", ".keras")


@dataclass(frozen=True)
class Step:
    step: int
    path: str     # what open_checkpoint is given
    label: str    # the name in the run folder


_EXTENSIONS = re.compile(r"(?:\.[A-Za-z]\w*)+$")   # .safetensors, .ckpt-1.index's .index, .h5 (whose 5 is no step)


def _number(name: str) -> int | None:
    """The number ending `name` once its extensions are off: step_10.safetensors 10, model.ckpt-1.index 1, cut.h5
    none; a hidden name none."""
    m = re.search(r"(\d+)$", _EXTENSIONS.sub("", name)) if not name.startswith(".") else None
    return int(m.group(1)) if m and len(m.group(1)) <= 18 else None


def _given_label(path: str) -> str:
    """A checkpoint given by path, named by what says its step: its own name (step_10.safetensors), else its folder's
    and its own (checkpoint-10/model.safetensors, step_10/.metadata: a file whose name holds no step, in a folder per
    step)."""
    path = os.path.normpath(path)
    name = os.path.basename(path) or path
    parent = os.path.basename(os.path.dirname(path))
    return f"{parent}/{name}" if _number(name) is None and parent and _number(parent) is not None else name


def discover(paths: list[str]) -> tuple[list[Step], str, list[dict]]:
    """(the steps in order, the layout found, the entries left out with why)."""
    if not paths:
        raise UsageError("trend needs a run folder or at least two checkpoints")
    for p in paths:
        if (why := absent(p)) is not None:
            raise why
    skipped: list[dict] = []
    if len(paths) == 1 and os.path.isdir(paths[0]):
        steps, layout, skipped = _run_folder(paths[0])
    else:
        labels = [_given_label(p) for p in paths]
        numbers = [_number(n.split("/")[0]) for n in labels]
        if all(n is not None for n in numbers):   # a shell glob's order is not the steps'
            steps = sorted((Step(n, p, lb) for n, p, lb in zip(numbers, paths, labels) if n is not None),
                           key=lambda s: s.step)
            layout = "checkpoints given, ordered by the step number in their names"
        else:
            steps = [Step(i, p, lb) for i, (p, lb) in enumerate(zip(paths, labels))]
            layout = "checkpoints given, in the order given (step = position)"
    seen: dict[int, str] = {}
    for s in steps:
        if s.step in seen:
            raise UsageError(f"{s.path}: step {s.step} again (also {seen[s.step]}); give the checkpoints one by one")
        seen[s.step] = s.path
    if len(steps) < 2:
        raise UsageError(f"{paths[0]}: trend needs at least two checkpoints, found {len(steps)} ({layout})")
    return steps, layout, skipped


def _run_folder(folder: str) -> tuple[list[Step], str, list[dict]]:
    try:
        names = sorted(os.listdir(folder))
    except OSError as e:
        raise FileNotFound(folder, f"cannot list the folder: {e.strerror}") from None
    for what, rx, is_dir in _LAYOUTS:
        found: list[Step] = []
        skipped: list[dict] = []
        for name in names:
            path = os.path.join(folder, name)
            m = rx.search(name) if rx is not None else None
            number = _number(name) if rx is None else int(m.group(1)) if m and len(m.group(1)) <= 18 else None
            if is_dir is None:   # numbered: a folder, or a weights file
                ok = os.path.isdir(path) or name.endswith(_WEIGHTS)
            else:
                ok = os.path.isdir(path) == is_dir
            if number is not None and ok:
                found.append(Step(number, path, name))
            elif not is_dir and what.startswith("Lightning") and name.endswith(".ckpt"):
                skipped.append({"name": name, "reason": "a .ckpt without step=N in its name"})
        if found:
            if len(found) > MAX_STEPS:
                raise UsageError(f"{folder}: {len(found):,} checkpoints, more than the {MAX_STEPS:,} trend reads")
            return sorted(found, key=lambda s: s.step), what, skipped
    raise UsageError(f"{folder}: no checkpoints found (checkpoint-N/, global_stepN/, *step=N.ckpt, or names ending "
                     "in a step number)")
