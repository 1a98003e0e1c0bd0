"""The config beside a checkpoint's weights: config.json found beside them (or named with --config), read bounded
(read_json), transformers 5's tagged floats decoded; a KerasHub preset's Keras config or a Mistral / Meta
params.json read as the transformers config it converts to; a URL's read ahead, in a thread of its own; the
quantisation record beside (formats/folders.py)."""
from __future__ import annotations

import contextvars
import importlib
import json
import os
from concurrent import futures
from typing import Any

from ..core import Checkpoint, files, urls
from ..core.files import check_inside, open_regular, size_of
from ..core.limits import limits
from ..errors import CheckpointError, reading
from . import folders


def read_json(path: str, cap: int, what: str) -> Any:
    """A JSON file of at most `cap` bytes (a regular file: never a FIFO or /dev/zero), inside the current scope (a
    folder's trainer_state.json linked out of it was read and shown: docs/security.md)."""
    check_inside(path, what)
    with open_regular(path, what) as f:
        size = size_of(f)
        if size > cap:
            raise CheckpointError(path, f"{what} is {size:,} bytes, more than the {cap:,} ckptstat reads "
                                        "(--limit to raise it)")
        data = f.read(size + 1)   # (read(n) allocates n bytes first: never more than the file has)
    if len(data) > cap:
        raise CheckpointError(path, f"{what} grew past {cap:,} bytes while it was read")
    return json.loads(data.decode("utf-8"))


def beside(weights_path: str, name: str) -> str | None:
    """The file `name` beside the weights (a file, or in a folder), if there is one."""
    if urls.is_url(weights_path):
        folder = weights_path if files.isdir(weights_path) else urls.parent(weights_path)
        return urls.join(folder, name) if files.isfile(urls.join(folder, name)) else None
    folder = weights_path if os.path.isdir(weights_path) else os.path.dirname(os.path.abspath(weights_path))
    p = os.path.join(folder, name)
    return p if os.path.lexists(p) else None   # (a folder, a FIFO or a dangling link there: load_config says so)


def find_config(weights_path: str) -> str | None:
    return beside(weights_path, "config.json")


def load_config(path: str) -> dict[str, Any]:
    """A config.json: a regular file (`--config /dev/zero` is refused) of at most limits().config_bytes."""
    with reading(path, "cannot read config"):
        cfg = read_json(path, limits().config_bytes, "config")
    if not isinstance(cfg, dict):
        raise CheckpointError(path, "config is not a JSON object")
    decoded: dict[str, Any] = _special_floats(cfg)
    return decoded


# transformers 5 writes a float JSON cannot hold as a tagged object (PreTrainedConfig._encode_special_floats: Mamba2's
# and its hybrids' time_step_limit [0.0, {"__float__": "Infinity"}]) and reads it back as the float
_FLOATS = {"Infinity": float("inf"), "-Infinity": float("-inf"), "NaN": float("nan")}


def _special_floats(obj: Any) -> Any:
    if isinstance(obj, dict):
        tag = obj.get("__float__") if len(obj) == 1 else None
        if isinstance(tag, str) and tag in _FLOATS:
            return _FLOATS[tag]
        return {k: _special_floats(v) for k, v in obj.items()}
    return [_special_floats(v) for v in obj] if isinstance(obj, list) else obj



def config_beside(ckpt: Checkpoint, path: str, config: str | os.PathLike[str] | None) -> None:
    """The config named (--config), else the config.json beside the local weights at `path` and its quantisation
    record, else a Mistral / Meta params.json (formats/native_params.py)."""
    cfg_path = os.fspath(config) if config is not None else find_config(path)
    if cfg_path is None:
        if not ckpt.config:
            importlib.import_module(f"{__package__}.native_params").take(ckpt, path)
        return
    if config is None:
        check_inside(cfg_path, "config", path)
    take_config(ckpt, cfg_path, load_config(cfg_path))
    # (beside a config.json found beside the weights, not one the user named elsewhere)
    sidecar = folders.quant_sidecar_beside(cfg_path, ckpt.config) if config is None and ckpt.config else None
    if sidecar is not None:
        check_inside(sidecar, "quantisation record", path)
        try:
            ckpt.quant_sidecar = load_config(sidecar)
        except CheckpointError as e:   # an optional record: the weights and config.json still answer
            ckpt.notes.append(f"{e}; ignored")



def take_config(ckpt: Checkpoint, cfg_path: str, cfg: dict[str, Any]) -> None:
    """`cfg` as the checkpoint's config.json; a KerasHub preset's Keras config or a Mistral / Meta params.json as the
    transformers config it reads as, if any (formats/keras_hub.py, formats/native_params.py `describe`)."""
    keras_hub = importlib.import_module(f"{__package__}.keras_hub") if "class_name" in cfg else None
    native = importlib.import_module(f"{__package__}.native_params")
    from_params = native.is_params(cfg_path, cfg)   # (--config params.json, or one found: native_params below)
    taken: dict[str, Any] | None = keras_hub.describe(ckpt, cfg_path, cfg) if keras_hub and keras_hub.is_keras_config(cfg) \
        else native.describe(ckpt, cfg) if from_params else cfg
    if taken is not None:   # (over the reader's own: a pickled model's config)
        ckpt.config, ckpt.config_path, ckpt.config_from = taken, cfg_path, "params.json" if from_params else None


def config_ahead(path: str) -> futures.Future[tuple[str | None, dict[str, Any] | None]]:
    """The config.json beside the URL `path` (a folder or a weights file), found, checked and read in a thread
    of its own, in a copy of the caller's context (its scope and limits): (its URL, its JSON), or (None, None)."""
    def read() -> tuple[str | None, dict[str, Any] | None]:
        cfg_path = find_config(path)
        if cfg_path is None:
            return None, None
        check_inside(cfg_path, "config", path)
        return cfg_path, load_config(cfg_path)

    pool = futures.ThreadPoolExecutor(max_workers=1)
    try:
        return pool.submit(contextvars.copy_context().run, read)
    finally:
        pool.shutdown(wait=False)
