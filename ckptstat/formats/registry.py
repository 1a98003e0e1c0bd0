"""Format registry: each reader module registers a Format whose `accept` looks at the file's first
and last bytes (docs/formats.md section 0), never only at its extension; `open_checkpoint` resolves a file,
a sharded `*.index.json` or a Hugging Face-style model folder, and is the one place where low-level
exceptions become a CorruptCheckpointError naming the file."""
from __future__ import annotations

import functools
import importlib
import os
import re
from collections.abc import Callable, Iterator, Mapping
from concurrent import futures
from dataclasses import dataclass
from typing import Any

from ..core import Checkpoint, TensorInfo, files, urls
from ..core.archive_magic import archive_kind
from ..core.files import check_inside, open_regular, regular, scope_for, scoped, size_of
from ..core.limits import limits
from ..core.switches import switches
from ..core.tensor_table import TensorTable
from ..errors import CheckpointError, CorruptCheckpointError, FileNotFound, UnknownFormatError, UsageError, reading
from . import folders
from .configs import config_ahead, config_beside, load_config, read_json, take_config

HEAD_BYTES = 4096


@dataclass(frozen=True)
class Probe:
    path: str
    size: int
    head: bytes   # the first HEAD_BYTES bytes

    @classmethod
    def of(cls, path: str) -> Probe:
        with open_regular(path) as f:   # a FIFO or a device is refused, never blocked on
            return cls(path, size_of(f), f.read(HEAD_BYTES))

    @functools.cached_property
    def tail(self) -> bytes:
        """The last 8 bytes, read when a format's `accept` asks (a URL's cost a request: a safetensors shard's
        never do)."""
        with open_regular(self.path) as f:
            f.seek(max(0, self.size - 8))
            return f.read(8)


@dataclass(frozen=True)
class Format:
    name: str
    accept: Callable[[Probe], bool]
    open: Callable[[str], Checkpoint]
    extensions: tuple[str, ...] = ()
    # Checks every checksum the format stores (raises CorruptCheckpointError); returns lines for notes.
    verify: Callable[[Checkpoint], list[str]] | None = None
    # A tensor's name as the reader spells it, from its spelling in a *.index.json weight_map (None: the same)
    index_name: Callable[[str], str] | None = None
    # A format with no magic bytes (a Flax msgpack file is any msgpack map): tried after every other format.
    fallback: bool = False


# The order rule: the formats' `accept`s are exclusive (no file, polyglots included, is accepted by two: the
# reader contract's test), so the order they are tried in cannot change which reads a file, except for the
# fallbacks, which are tried last.
FORMATS: list[Format] = []
# Reader modules, imported on first use and in this order (start-up time: a safetensors file imports its reader
# alone). Adding a format = one module + one line here.
_MODULES = ["safetensors", "torch", "tf_bundle", "keras_h5", "gguf",
            "onnx_model", "numpy_npy", "keras_zip", "saved_model", "dcp", "nemo", "numpy_pickle",
            "flax_msgpack"]
_loaded = False


def _rank(fmt: Format) -> int:
    """The place in _MODULES of the reader module that defines fmt (after them all: a format registered from
    elsewhere, a test's)."""
    home = fmt.accept.__module__.removeprefix(f"{__package__}.").split(".")[0]
    return _MODULES.index(home) if home in _MODULES else len(_MODULES)


def register(fmt: Format) -> None:
    # in _MODULES order whatever imports a reader module first (analysis/scan/ imports numpy_npy's and torch's
    # helpers, so they may register before safetensors): the first format that accepts a file never depends on it
    i = len(FORMATS)
    while i and _rank(FORMATS[i - 1]) > _rank(fmt):
        i -= 1
    FORMATS.insert(i, fmt)


def _load_all() -> None:
    global _loaded
    if not _loaded:
        for name in _MODULES:
            importlib.import_module(f"{__package__}.{name}")
        _loaded = True


def _formats_in_order() -> Iterator[Format]:
    """FORMATS in registry order, importing reader modules only as far as the caller reads: a
    safetensors file loads the safetensors reader alone (start-up time, docs/performance.md). The
    order, and so the first format that accepts, is the same as with every module loaded."""
    for rank, name in enumerate(_MODULES):
        importlib.import_module(f"{__package__}.{name}")   # (a no-op once imported)
        yield from [f for f in FORMATS if _rank(f) == rank and not f.fallback]
    yield from [f for f in FORMATS if _rank(f) == len(_MODULES) and not f.fallback]
    yield from [f for f in FORMATS if f.fallback]


_ZIP = b"PK\x03\x04"
# what a file named as one of these formats starts with, even damaged (a zip's first local header, a pickle's PROTO)
FALLBACK_HEADS = {"pytorch (zip)": _ZIP, "pytorch export (.pt2)": _ZIP, "numpy (npz)": _ZIP, "keras (zip)": _ZIP,
                  "pytorch (legacy)": b"\x80"}


def named_as_checkpoint(path: str) -> bool:
    """Whether the file's name ends as a format's files do (`.safetensors`, `.gguf`, `.pt`, ...)."""
    _load_all()
    return path.endswith(tuple(e for f in FORMATS for e in f.extensions if e))


def detect(path: str) -> Format:
    probe = Probe.of(path)
    for fmt in _formats_in_order():
        if fmt.accept(probe):
            return fmt
    _load_all()
    if probe.size == 0:
        raise UnknownFormatError(path, "file is empty")
    # No magic matched, but the name says what the file should be: let that reader say what is wrong, where the file
    # starts as that format's files do (a truncated `.keras` zip is no HDF5 file; a text file named `.bin` no zip)
    zip_head = probe.head.startswith(_ZIP)
    for fmt in FORMATS:
        head = FALLBACK_HEADS.get(fmt.name)
        if path.endswith(fmt.extensions) and fmt.extensions and (head == _ZIP) == zip_head \
                and probe.head.startswith(head or b""):
            return fmt
    kind = archive_kind(probe.head)
    if kind is not None:   # a model.tar.gz, a zipped folder: what users extract first
        raise UnknownFormatError(path, f"not a checkpoint format ckptstat reads: {kind} (extract it and point ckptstat "
                                       "at what it holds; `ckptstat scan` judges the files inside)")
    raise UnknownFormatError(path, f"not a checkpoint format ckptstat reads (first bytes {probe.head[:8].hex(' ')})")


# Keras 3's sharded weights (`model.save_weights("x.weights.json", max_shard_size=...)`, keras saving_lib
# ShardedH5IOStore; KerasHub's `model.weights.json`): its weight_map keys each layer's variable group
# (`/layers/dense/vars`) to the shard holding its variables, or to a list of shards where they span several.
KERAS_INDEX = ".weights.json"


# What a Hugging Face model folder may hold, in order of preference. The first four in the order transformers'
# from_pretrained looks for them in a folder (modeling_utils.py `_get_resolved_checkpoint_files`): the single file
# before the index, so a folder save_pretrained wrote twice (once sharded, once not: it leaves the other's
# model.safetensors or index behind) is read as transformers loads it.
TRANSFORMERS_WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                        "pytorch_model.bin.index.json")
FOLDER_CANDIDATES = [
    *TRANSFORMERS_WEIGHTS,
    "tf_model.h5.index.json",
    "tf_model.h5",
    "model.weights.h5",
    "model.weights.json",  # Keras 3's sharded weights (KerasHub reads model.weights.h5 first where both are there)
    "checkpoint",          # TF bundle: a text file naming the latest prefix
    "saved_model.pb",      # a TF SavedModel: its variables/ bundle (formats/saved_model.py)
    "model.onnx",          # an Optimum / transformers.js ONNX export
    *folders.ADAPTER_WEIGHTS,     # a PEFT adapter (formats/folders.py)
    *folders.DIFFUSERS_WEIGHTS,   # a diffusers model, e.g. one component of a pipeline
    "flax_model.msgpack.index.json",   # Flax (transformers' FLAX_WEIGHTS_*): only when no other weights file is there
    "flax_model.msgpack",
    ".metadata",           # a torch.distributed.checkpoint folder (formats/dcp/)
]


def resolve_folder(folder: str) -> str:
    # A folder URL (an hf:// repository, a listed https:// folder, an s3:// prefix) is listed once.
    listing = files.listdir(folder) if urls.is_url(folder) else None
    for name in FOLDER_CANDIDATES:
        p = files.join(folder, name)
        if name in listing if listing is not None else os.path.isfile(p):
            return p
    for suffix in _folder_suffixes():
        found = sorted(f for f in (os.listdir(folder) if listing is None else listing) if f.endswith(suffix))
        if len(found) > 1 and suffix == ".gguf":   # a GGUF split set has no index: its shards find each other by name
            from .gguf_split import pick_shard
            shard = pick_shard(found)
            found = [shard] if shard else found
        if len(found) > 1:  # shards without their index, or unrelated files: never pick one silently
            advice = {".gguf": ", a shard of a GGUF split set opens the whole set",
                      ".h5": ", or the shards' *.index.json or Keras *.weights.json"}.get(
                suffix, ", or the shards' *.index.json" if suffix in INDEXED_SUFFIXES else "")
            raise UsageError(f"{folder}: folder holds {len(found)} {suffix} files ({', '.join(found[:4])}"
                             f"{', ...' if len(found) > 4 else ''}); pass one file{advice}")
        if found:
            return files.join(folder, found[0])
    if folders.is_pipeline(folder):
        raise UsageError(f"{folder}: a diffusers pipeline (model_index.json): `ckptstat summary` totals every component; "
                         "other commands take one component's folder (unet, transformer, vae, text_encoder...)")
    repos = [] if listing is not None else [n for n in os.listdir(folder) if n.startswith(files.HF_CACHE_REPOS)]
    if repos:   # ~/.cache/huggingface/hub itself
        named = ", ".join(sorted(repos)[:3]) + (", ..." if len(repos) > 3 else "")
        raise UsageError(f"{folder}: a Hugging Face cache of {len(repos)} repositor{'y' if len(repos) == 1 else 'ies'} "
                         f"({named}): pass one of them; `ckptstat scan` and `audit` take the whole cache")
    if listing is None:   # an orbax CheckpointManager's folder of steps: refused naming them (formats/orbax/)
        orbax = importlib.import_module(f"{__package__}.orbax")
        if steps := orbax.manager_steps(folder):
            raise orbax.refuse_manager(folder, steps)
    raise FileNotFound(folder, "folder holds no weights file ckptstat recognises" + files.hf_cache_hint(folder))


# A folder without a FOLDER_CANDIDATES file: the first of these its files end with, in this order of preference; then
# every other format's extensions (a Lightning run's `last.ckpt`, a `.pt2`, an `.npy`: _folder_suffixes).
PREFERRED_SUFFIXES = (".safetensors.index.json", ".safetensors", ".bin.index.json", ".bin", ".pt", ".pth", KERAS_INDEX,
                      ".h5", ".index", ".gguf", ".onnx", ".keras", ".npz", ".msgpack")

INDEXED_SUFFIXES = (".safetensors", ".bin", ".h5", ".msgpack")   # the weights transformers shards behind a *.index.json


def _folder_suffixes() -> Iterator[str]:
    yield from PREFERRED_SUFFIXES
    _load_all()   # (only when no preferred file is there: a folder of safetensors loads no other reader)
    yield from dict.fromkeys(e for f in FORMATS for e in f.extensions if e not in PREFERRED_SUFFIXES)


def is_index(path: str) -> bool:
    """A sharded checkpoint's index: transformers' `*.index.json` or Keras' `*.weights.json`."""
    return path.endswith((".index.json", KERAS_INDEX))


def index_shards(path: str, index: Any) -> dict[str, list[str]]:
    """Each shard file an index names (a plain file name in its folder) -> the names it maps there: tensors, or a
    Keras index's variable groups."""
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    keras = path.endswith(KERAS_INDEX)
    if not isinstance(weight_map, dict):
        raise CorruptCheckpointError(path, "index has no weight_map of tensor name -> shard file")
    shards: dict[str, list[str]] = {}
    for name, value in weight_map.items():
        listed = value if keras and isinstance(value, list) and value else [value]
        for shard in listed:
            if not isinstance(shard, str):
                raise CorruptCheckpointError(path, f"index maps {name!r} to {str(value)[:60]}, not a shard file name")
            while shard.startswith("./"):   # `./model-00001-of-00002.safetensors`: transformers joins it to the folder
                shard = shard[2:]
            if os.path.basename(shard) != shard or shard in ("", ".", ".."):
                raise CorruptCheckpointError(path, f"shard {shard!r} is not a file name in the index's folder")
            shards.setdefault(shard, []).append(name)
    return shards


def _open_index(path: str, opened: Callable[[Checkpoint], None] | None = None) -> Checkpoint:
    """A sharded checkpoint: `{"metadata": {...}, "weight_map": {tensor: shard file}}` (Keras: {variable group: shard
    file or files}); `opened` is called with each shard as it is opened, in order (open_checkpoint)."""
    index = read_json(path, limits().index_bytes, "index")
    shards = index_shards(path, index)
    folder = os.path.dirname(path)
    keras = path.endswith(KERAS_INDEX)

    def open_shard(shard: str) -> Checkpoint:
        shard_path = os.path.join(folder, shard)
        if not urls.is_url(shard_path) and not os.path.lexists(shard_path):   # (a URL's 404 says it)
            raise FileNotFound(shard_path, f"shard listed in {os.path.basename(path)} is missing")
        check_inside(shard_path, "shard", path)
        regular(shard_path, "shard")
        return _open_file(shard_path)

    # A URL's shards are opened together (core/urls.py `concurrently`): their headers cost a few round trips,
    # not one or two per shard.
    parts = urls.concurrently(open_shard, shards) if urls.is_url(path) else map(open_shard, shards)
    merged: Checkpoint | None = None
    parts_opened: list[tuple[str, Checkpoint]] = []
    for (shard, names), part in zip(shards.items(), parts):
        shard_path = os.path.join(folder, shard)
        if keras:   # a group is there when one of its variables is (`layers/dense/vars/0`)
            groups = {n.rpartition("/")[0] for n in part.tensors}
            missing = [n for n in names if n.strip("/") not in groups]
        else:
            spell = next((f.index_name for f in FORMATS if f.name == part.format and f.index_name), None)
            missing = [n for n in (map(spell, names) if spell else names) if n not in part.tensors]
        if missing:
            what = "variable group(s)" if keras else "tensor(s)"
            raise CorruptCheckpointError(shard_path, f"index maps {len(missing)} {what} here that the shard lacks, "
                                                     f"e.g. {missing[0]!r}")
        if merged is None:
            merged = Checkpoint(path=path, format=part.format, tensors={}, files=(), metadata=dict(part.metadata),
                                distinct=True)
        parts_opened.append((shard_path, part))
        if opened is not None:
            opened(part)
        merged.files += (shard_path,)
        merged.distinct = merged.distinct and part.distinct   # names in two files never share bytes
        merged.readers.update(part.readers)
        merged.notes += part.notes
        merged.dropped.update(part.dropped)
    if merged is None:
        raise CorruptCheckpointError(path, "index lists no tensors")
    merged.tensors = _joined(parts_opened)
    meta = index.get("metadata")
    if isinstance(meta, dict) and "total_size" in meta:   # (Keras writes a float: 78464.0)
        total = meta["total_size"]
        merged.metadata["index.total_size"] = str(int(total) if isinstance(total, float) and total.is_integer() else total)
    if isinstance(meta, dict) and type(meta.get("total_parameters")) is int:   # transformers 5: num_parameters()
        merged.metadata["index.total_parameters"] = str(meta["total_parameters"])
    merged.dropped = {k: v for k, v in merged.dropped.items() if k not in merged.tensors}
    merged.format += " (sharded)"
    return merged


def _joined(parts: list[tuple[str, Checkpoint]]) -> Mapping[str, TensorInfo]:
    """The shards' tensors, in order: their tables joined where every shard gave one (core/tensor_table.py), else a
    dict; a name in two shards is an error naming the second."""
    tables = [part.tensors for _, part in parts if isinstance(part.tensors, TensorTable)]
    if len(tables) == len(parts):
        table = TensorTable.concat(tables)
        if len(set(table.names)) == len(table):   # no name in two shards
            return table
    tensors: dict[str, TensorInfo] = {}
    for shard_path, part in parts:
        for name, info in part.tensors.items():
            if name in tensors:
                raise CorruptCheckpointError(shard_path, f"tensor {name!r} also appears in another shard")
            tensors[name] = info
    return tensors


# Formats whose readers take every byte through the core entry points (open_regular, file_size, pread), so
# that a URL reads as a file does (docs/remote.md; h5py reads the remote file object); the others (TF bundles, ONNX,
# numpy and Keras zips) read local files only.
REMOTE_FORMATS = frozenset({"safetensors", "gguf", "pytorch (zip)", "pytorch (legacy)", "flax (msgpack)",
                            "pytorch export (.pt2)", "nemo (.nemo)", "pickle (numpy arrays)", "keras-h5"})


def _open_file(path: str) -> Checkpoint:
    fmt = detect(path)
    if urls.is_url(path) and fmt.name not in REMOTE_FORMATS:
        raise CheckpointError(urls.redact(path), f"{fmt.name} files are read from local files only; download the file first")
    return fmt.open(path)


def verify_checkpoint(ckpt: Checkpoint) -> list[str]:
    """Check the checksums the checkpoint's format stores; raises CorruptCheckpointError on a mismatch."""
    _load_all()
    base = ckpt.format.split(" ")[0]
    for fmt in FORMATS:
        if fmt.name == base and fmt.verify is not None:
            return fmt.verify(ckpt)
    return [f"verify: the {ckpt.format} format stores no checksums; nothing to check"]


def open_checkpoint(path: str | os.PathLike[str], config: str | os.PathLike[str] | None = None,
                    verify: bool = False, allow_external: bool | None = None,
                    opened: Callable[[Checkpoint], None] | None = None) -> Checkpoint:
    """Open a checkpoint from its headers: a file, a `*.index.json`, a model folder, or a TF prefix
    (`model.ckpt-10`, which is not a file: `model.ckpt-10.index` is). verify=True also checks the
    checksums the format stores (TF bundles: crc32c of every tensor).

    Only the files named and, for a folder, index or prefix, files inside that folder are read; a
    reference outside (HDF5 external links and storage, a TF pointer elsewhere, a symlink out of the
    folder) raises ExternalReferenceError unless allow_external (None: the process default, which the
    CLI's --allow-external sets). See docs/security.md.

    `opened`, for a sharded checkpoint (a `*.index.json`), is called with each shard's own Checkpoint as it is
    opened, in the index's order, before the next is handed over (a URL's `stats` starts its value reads there:
    analysis/stats/readahead.py)."""
    path = os.fspath(path)
    if urls.is_url(path):   # https://, hf://, s3://...: read through the remote source (docs/remote.md)
        from .. import sources  # noqa: F401 - installs it in core.urls; fsspec itself loads on the first request
        if not files.exists(path):
            raise FileNotFound(urls.redact(path), urls.backend().why_absent(path))
    elif not os.path.exists(path) and os.path.isfile(path + ".index"):
        path = path + ".index"   # a TF checkpoint prefix
    elif (absent := files.absent(path)) is not None:
        raise absent
    elif os.path.isdir(path):
        with reading(path, "cannot list the folder"):   # (one the user may not read: one line, not a PermissionError)
            os.listdir(path)
        if (snapshot := files.hf_cache_snapshot(path)) is not None:
            path = snapshot   # ~/.cache/huggingface/hub/models--org--name: the revision refs/main names, opened as itself
    allow = switches().allow_external if allow_external is None else allow_external
    scope = scope_for(path, allow, () if config is None else (os.fspath(config),))
    def open_inside(p: str) -> Checkpoint:
        check_inside(p, "file", path)   # before it is opened: each file is opened as one named, link or not
        return open_checkpoint(p, config, allow_external=allow)

    with scoped(scope):
        if not urls.is_url(path) and os.path.isdir(path):   # a folder a reader module reads as a whole
            for marker, module in _FOLDER_HOOK_MODULES.items():   # (a plain model folder imports none of them)
                if os.path.lexists(os.path.join(path, marker)):
                    importlib.import_module(f"{__package__}.{module}")
            if any(DCP_SHARD.match(n) for n in os.listdir(path)):
                importlib.import_module(f"{__package__}.dcp.hf")
            for read_folder in _FOLDER_HOOKS:
                with reading(path):
                    whole = read_folder(path, open_inside)
                if whole is not None:
                    for f in whole.files:   # every file it read inside the folder (a symlink out of it is refused)
                        check_inside(f, "file", path)
                    # a DCP folder without a global .metadata (rank-local files, transformers' distributed save's
                    # shards) takes the config beside it as one with .metadata does; the other hooks read their own
                    if whole.config is None and whole.format.startswith("dcp"):
                        config_beside(whole, path, config)
                    return whole
        if urls.is_url(path) and files.isdir(path) and (read_url := _url_folder_hook(files.listdir(path))):
            with reading(path):   # an orbax item or step folder, a KerasHub preset over a URL, read as the local one
                remote: Checkpoint | None = read_url(path, open_inside)
            if remote is not None:
                for f in remote.files:
                    check_inside(f, "file", path)
                return remote
        target = resolve_folder(path) if files.isdir(path) else path
        if target != path:
            check_inside(target, "weights file", path)
        if target.endswith(".distcp") and any(os.path.isfile(os.path.join(os.path.dirname(target), m))
                                              for m in (".metadata", "__0.metadata")):   # (a global or rank-local one)
            raise UsageError(f"{target}: one rank's file of a torch.distributed.checkpoint folder, which holds parts of "
                             f"tensors; open the folder {os.path.dirname(target) or '.'} (formats/dcp/)")
        if DCP_SHARD.match(os.path.basename(target)):
            raise UsageError(f"{target}: one rank's shard of a torch.distributed.checkpoint HuggingFaceStorageWriter "
                             f"folder, which holds parts of tensors; open the folder {os.path.dirname(target) or '.'} "
                             "(formats/dcp/hf.py)")
        regular(target)
        hook = _HOOK_MODULES.get(os.path.basename(target))
        if hook:
            importlib.import_module(f"{__package__}.{hook}")
        # A URL's config.json is read beside the weights (its round trips, two over the Hub, overlap theirs), started
        # before their first request and waited for even when they fail: a file that cannot be read costs the same
        # requests on every run and every executor (an audit record's `fetched`, docs/audit.md). Its error, if any,
        # is raised after the weights', where reading it after them raised it.
        ahead = config_ahead(path) if config is None and urls.is_url(path) else None
        try:
            # The one boundary for header parsing: whatever a parser trips over in a hostile file ends here,
            # as one line naming the file (errors.reading).
            with reading(target):
                if is_index(target):
                    ckpt = _open_index(target, opened)
                else:
                    opener = _FILE_HOOKS.get(os.path.basename(target))
                    ckpt = opener(target) if opener else _open_file(target)
                if verify:
                    ckpt.notes += verify_checkpoint(ckpt)
        finally:
            if ahead is not None:
                futures.wait([ahead])
        for f in ckpt.files:   # what the reader found beside the target (shards, TF data files)
            check_inside(f, "file", target)
        if ahead is not None:
            cfg_path, cfg = ahead.result()
            if cfg_path is not None and cfg is not None:
                take_config(ckpt, cfg_path, cfg)
            else:
                importlib.import_module(f"{__package__}.native_params").take(ckpt, path)
        else:
            config_beside(ckpt, path, config)
        if target != path and not urls.is_url(path):
            ckpt.notes += _unread_weights(path, target)
        adapter = folders.adapter_config_beside(target)
        if adapter is not None:
            check_inside(adapter, "adapter config", path)
            ckpt.adapter, ckpt.adapter_path = load_config(adapter), adapter
    return ckpt


def _unread_weights(folder: str, target: str) -> list[str]:
    """The notes of a folder holding more than one of transformers' weights files (a repository shipping two formats,
    a folder save_pretrained wrote twice, sharded and not): a name before the one read that is no file (a cache
    snapshot's link to a deleted blob), passed over as transformers passes it over; those after it, never loaded."""
    read = os.path.basename(target)
    if read not in TRANSFORMERS_WEIGHTS:
        return []
    at = TRANSFORMERS_WEIGHTS.index(read)
    there = [i for i, n in enumerate(TRANSFORMERS_WEIGHTS) if i != at and os.path.lexists(os.path.join(folder, n))]
    gone, later = [TRANSFORMERS_WEIGHTS[i] for i in there if i < at], [TRANSFORMERS_WEIGHTS[i] for i in there if i > at]
    notes = []
    if gone:
        notes.append(f"{', '.join(gone)}: no file to read (a link to a missing blob?), passed over as transformers' "
                     f"from_pretrained passes it over; {read} read")
    if later:
        notes.append(f"the folder also holds {', '.join(later)}, not read: transformers' from_pretrained loads {read} first")
    return notes


# Folders read as a whole before resolve_folder picks one weights file: each hook returns None for a folder not its
# own (formats/training.py: Hugging Face Trainer and DeepSpeed folders, the model and its optimizer state together);
# given the folder and a function opening one of its files as open_checkpoint does. Registered by the module named
# for a file the folder holds, imported then.
_FOLDER_HOOKS: list[Callable[[str, Callable[[str], Checkpoint]], Checkpoint | None]] = []
_FOLDER_HOOK_MODULES = {"trainer_state.json": "training", "latest": "training",   # Trainer; DeepSpeed's run folder
                        "optimizer.pt": "training",   # a Trainer folder without trainer_state.json (training.py)
                        "optimizer.bin": "training",  # an accelerate save_state folder (training.py)
                        "mp_rank_00_model_states.pt": "training",                 # DeepSpeed global_stepN/ (ZeRO 0-2)
                        "zero_pp_rank_0_mp_rank_00_model_states.pt": "training",  # ... ZeRO 3
                        "__0.metadata": "dcp",      # a DCP folder saved without rank coordination (rank-local metadata)
                        "weights": "dcp",           # NeMo 2.0: a Megatron distributed checkpoint in weights/ (dcp/megatron.py)
                        "manifest.ocdbt": "orbax", "_METADATA": "orbax",   # an orbax item: OCDBT, or a folder per array
                        "_CHECKPOINT_METADATA": "orbax",                   # ... an orbax step folder of items
                        "model.weights.h5": "keras_hub", "model.weights.json": "keras_hub",   # a KerasHub preset
                        "consolidated.01.pth": "model_parallel"}   # Meta's model-parallel original/ folder


def _url_folder_hook(listing: list[str]) -> Callable[[str, Callable[[str], Checkpoint]], Checkpoint | None] | None:
    """The folder hook of the reader module that reads a URL folder holding `listing` as a whole: orbax's and
    KerasHub's, which read through core/files.py (the other hooks read local folders with os.*)."""
    module = next((m for name, m in _FOLDER_HOOK_MODULES.items() if name in listing and m in _URL_FOLDER_HOOKS), None)
    return None if module is None else importlib.import_module(f"{__package__}.{module}").open_folder


_URL_FOLDER_HOOKS = ("orbax", "keras_hub")
# ... and one rank's file of DCP's HuggingFaceStorageWriter(save_distributed=True) (formats/dcp/hf.py SHARD)
DCP_SHARD = re.compile(r"^shard-\d{5}-model-\d{5}-of-\d{5}\.safetensors$")
# Files whose name, not bytes, decides how they are opened (e.g. TF's `checkpoint` pointer file).
_FILE_HOOKS: dict[str, Callable[[str], Checkpoint]] = {}
# ... and the reader module that registers each hook, imported when such a name is opened.
_HOOK_MODULES = {"checkpoint": "tf_bundle", "saved_model.pb": "saved_model", ".metadata": "dcp", "manifest.ocdbt": "orbax"}
