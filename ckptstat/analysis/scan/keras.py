"""What loading a Keras model config would run, found without importing anything (docs/security.md, "Keras configs").

A Keras 3 `.keras` archive's `config.json`, and a Keras 2 `.h5` file's `model_config` / `training_config`
attributes, name every object to rebuild by `class_name`, `module` and `registered_name`. On load,
keras/src/saving/serialization_lib.py `deserialize_keras_object` (and, for `.h5`,
keras/src/legacy/saving/saving_utils.py `model_from_config`, which hands objects with a `module` to the same
function) resolves each in `_retrieve_class_or_fn`:

- a `registered_name` the user's code registered (`register_keras_serializable`) wins, and nothing is imported;
- `module` `keras` / `keras.*`: the symbol of Keras' public API, refused when it is one of the
  `NON_MODELING_APIS` (`keras.utils.get_file`, `keras.config.enable_unsafe_deserialization`, ...): Keras before
  that list (3.11) called them while loading (CVE-2025-8747), with safe_mode on; and before 3.11 any other module of
  Keras' own package was imported and its named attribute taken, whatever it was, so the same functions named by
  their internal module (`keras.src.utils.file_utils.get_file`) are findings too;
- `module` `builtins`, `class_name` `function`: one of Keras' own activations, losses, ... by name;
- any other `module`: keras 3.9 and later import it only when its package is `keras`, `keras_hub`, `keras_cv` or
  `keras_nlp`; keras before 3.9 imported whatever module was named and took the named attribute, `builtins`
  included, with safe_mode on (CVE-2025-1550): importing a module runs its code, and a function so found is
  called as the layer's activation, initializer, ...
- `Lambda` layers and `__lambda__` objects hold marshalled bytecode, which only safe_mode=False rebuilds
  (`python_utils.func_load`).

A keras_hub tokenizer whose config names a file (`vocabulary`, `merges`, `proto`, `special_tokens`,
`language_tokens` as a path: a preset keeps its vocabulary in `assets/`) reads that file while it is built; so do
Keras' own lookup layers (`StringLookup`, `IntegerLookup`, `TextVectorization`, layers/preprocessing/index_lookup.py)
with safe_mode off. A `TorchModuleWrapper` whose config holds its `module` as a string (a base64 pickle) is
`torch.load(..., weights_only=False)` of those bytes with safe_mode off (keras/src/utils/torch_utils.py `from_config`).

So: bytecode, a Python standard-library module (`os`, `subprocess`, `builtins.eval`, ...), a Keras non-modeling API
and a tokenizer's file are findings (unsafe); a module of any other package (a user's custom layers, a third-party
library) is suspicious (status "unknown": what importing it runs is that package's code).
"""
from __future__ import annotations

import builtins
import json
import sys
from dataclasses import dataclass
from typing import Any

from ...errors import CorruptCheckpointError
from .torch_load import plain_report

MAX_NODES = 1_000_000   # JSON values looked at in a Keras config

# serialization_lib.py: the packages whose modules keras >= 3.9 imports itself, and tf_keras (Keras 2's own).
KERAS_PACKAGES = frozenset({"keras", "tf_keras", "keras_hub", "keras_cv", "keras_nlp"})
# serialization_lib.py `NON_MODELING_APIS` (keras 3.15): refused by Keras since 3.11, called before.
NON_MODELING_APIS = frozenset({
    "keras.backend.clear_session", "keras.config.enable_unsafe_deserialization", "keras.models.load_model",
    "keras.models.model_from_json", "keras.models.save_model", "keras.preprocessing.image_dataset_from_directory",
    "keras.preprocessing.image.load_img", "keras.preprocessing.image.save_img",
    "keras.preprocessing.text_dataset_from_directory", "keras.saving.deserialize_keras_object",
    "keras.saving.load_model", "keras.saving.load_weights", "keras.saving.register_keras_serializable",
    "keras.saving.save_model", "keras.saving.save_weights", "keras.saving.serialize_keras_object",
    "keras.utils.audio_dataset_from_directory", "keras.utils.clear_session", "keras.utils.deserialize_keras_object",
    "keras.utils.get_file", "keras.utils.image_dataset_from_directory", "keras.utils.load_img",
    "keras.utils.register_keras_serializable", "keras.utils.save_img", "keras.utils.serialize_keras_object",
    "keras.utils.text_dataset_from_directory",
})
# Each is a function of a keras/src module (keras.utils.get_file is keras.src.utils.file_utils.get_file): keras before
# 3.11 imports any module of its own package and takes the named attribute (no KerasSaveable check before keras PR
# 21429), so the internal path reaches the same function. By name -> the public API.
_NON_MODELING_BY_NAME = {api.rpartition(".")[2]: api for api in NON_MODELING_APIS}
_PY_BUILTINS = frozenset(dir(builtins))


@dataclass(frozen=True)
class KerasFinding:
    where: str       # the JSON path in the config
    kind: str        # "bytecode", "import" (unsafe) or "custom" (suspicious)
    what: str        # the layer, or `module.name`
    why: str


def _short(v: object, n: int = 120) -> str:
    return str(v)[:n]


# keras_hub tokenizers' arguments that name a file to read while the object is built (tokenizers/word_piece_tokenizer.py
# `set_vocabulary`, byte_pair_tokenizer.py, sentence_piece_tokenizer.py `set_proto`, models/whisper/whisper_tokenizer.py
# `_load_dict`, models/parseq/parseq_tokenizer.py): a preset keeps its vocabulary in `assets/`, its config saying null
TOKENIZER_FILES = ("vocabulary", "merges", "proto", "special_tokens", "language_tokens")
INLINE_PROTO = 2048   # sentence_piece_tokenizer.py: a longer base64 string is the model itself, not a path
# ... those that read it even with safe_mode on (keras_hub 0.32; the others check since keras-hub PR 2517, January 2026):
# fixtures/make_keras_hub.py watches keras_hub open the file
READS_IN_SAFE_MODE = frozenset({"PARSeqTokenizer", "WhisperTokenizer"})


def _tokenizer_file(cls: object, inner: object) -> tuple[str, str] | None:
    """(argument, path) of a tokenizer whose config names a file for it to read, else None."""
    if not isinstance(cls, str) or not cls.endswith("Tokenizer") or not isinstance(inner, dict):
        return None
    for key in TOKENIZER_FILES:
        value = inner.get(key)
        if isinstance(value, str) and value and not (key == "proto" and len(value) > INLINE_PROTO):
            return key, value
    return None


LOOKUP_LAYERS = ("StringLookup", "IntegerLookup", "TextVectorization")   # a `vocabulary` path read with safe_mode off


def _object(node: dict[str, object], where: str) -> KerasFinding | None:
    cls, inner, module = node.get("class_name"), node.get("config"), node.get("module")
    if cls in LOOKUP_LAYERS and isinstance(inner, dict) and isinstance(inner.get("vocabulary"), str) \
            and inner["vocabulary"]:
        return KerasFinding(where, "file", f"{cls} vocabulary = {_short(inner['vocabulary'], 120)!r}",
                            "keras reads the vocabulary file this names while loading with safe_mode off (refused with "
                            "it on: index_lookup.py): a file outside the model, its contents then in the model")
    if cls == "TorchModuleWrapper" and isinstance(inner, dict) and isinstance(inner.get("module"), str):
        return KerasFinding(where, "pickle", f"TorchModuleWrapper {_short(inner.get('name'), 80)!r}",
                            "its torch module is a base64 pickle in the config, which load_model(safe_mode=False) "
                            "unpickles with torch.load(weights_only=False): whatever the pickle names runs")
    if (read := _tokenizer_file(cls, inner)) is not None:
        when = "even with safe_mode on (keras_hub 0.32)" if cls in READS_IN_SAFE_MODE else \
            "with safe_mode off, or with safe_mode on before keras-hub's fix (PR 2517, January 2026)"
        return KerasFinding(where, "file", f"{_short(cls, 80)} {read[0]} = {_short(read[1], 120)!r}",
                            f"keras_hub reads the file this names into the tokenizer while loading, {when}: a file "
                            "outside the model, its contents then in the model")
    if cls == "Lambda":
        name = inner.get("name") if isinstance(inner, dict) else None
        return KerasFinding(where, "bytecode", f"Lambda layer {_short(name, 80)!r}",
                            "its function is marshalled Python bytecode (load_model(safe_mode=False) runs it)")
    if cls == "__lambda__":
        return KerasFinding(where, "bytecode", "a __lambda__ function",
                            "marshalled Python bytecode (load_model(safe_mode=False) runs it)")
    if not isinstance(module, str) or not module or not isinstance(cls, str):   # (keras imports only an object's)
        return None
    # a function's name is its `config` (serialization_lib `class_name == "function"`), a class's its class_name
    name = inner if cls == "function" and isinstance(inner, str) else cls
    what = f"{_short(module)}.{_short(name)}"
    package = module.split(".", 1)[0]
    if package in KERAS_PACKAGES:
        if name in _NON_MODELING_BY_NAME:
            api = _NON_MODELING_BY_NAME[name]
            via = "" if f"{module}.{name}" == api else f" ({api}, named by a module of keras' own)"
            return KerasFinding(where, "import", what, f"a Keras API that is no model part{via}: keras before 3.11 "
                                "calls it while loading, safe_mode on (CVE-2025-8747 get_file, CVE-2025-9906 "
                                "enable_unsafe_deserialization); later keras refuses it")
        return None
    if module == "builtins" and cls == "function" and name not in _PY_BUILTINS:
        return None   # Keras' own activations, losses, ... by name (serialization_lib BUILTIN_MODULES)
    if module == "builtins" or package in sys.stdlib_module_names:
        return KerasFinding(where, "import", what, "keras before 3.9 imports this module and takes the named object, "
                            "safe_mode on (CVE-2025-1550); keras 3.9+ refuses it unless the user registered the name")
    return KerasFinding(where, "custom", what, "keras before 3.9 imports this module (its code runs on import), "
                        "safe_mode on (CVE-2025-1550); keras 3.9+ imports it only if it is a Keras package, else "
                        "needs the user's own registered class")


class PastBounds(CorruptCheckpointError):
    """A Keras config past what scan reads (its bytes, its values): the file is `unknown`, never `unreadable`, since
    Keras reads it whole (loaders.py `_keras`, `_keras_h5`)."""


def load_config(text: str | bytes, source: str, path: str) -> object:
    """A Keras config's JSON, parsed only when its text can hold at most MAX_NODES values: json.loads builds every value
    before config_findings counts them (60-200 B each: 16 MiB of `{},`, which a 20 KB archive inflates to, took 1.3
    GB). Every value but the first opens its container or follows a comma, so the count of `[`, `{` and `,` (inside
    strings too: an upper bound) bounds the values."""
    if isinstance(text, str):
        values = 1 + text.count("[") + text.count("{") + text.count(",")
    else:
        values = 1 + text.count(b"[") + text.count(b"{") + text.count(b",")
    if values > MAX_NODES:
        raise PastBounds(path, f"{source}: more than {MAX_NODES:,} values (its {len(text):,} bytes may hold "
                                           f"{values:,})")
    return json.loads(text)


def config_findings(config: object, source: str, path: str | None = None) -> list[KerasFinding]:
    """Every object of a Keras config that loading would import or run, walked without recursion (a config
    nested thousands deep is only deep) and without importing anything."""
    found: list[KerasFinding] = []
    stack: list[tuple[object, str]] = [(config, source)]
    seen = 0
    while stack:
        node, where = stack.pop()
        seen += 1
        if seen > MAX_NODES:
            raise PastBounds(path, f"{source}: more than {MAX_NODES:,} values")
        if isinstance(node, dict):
            f = _object(node, where)
            if f is not None:
                found.append(f)
            stack.extend((v, f"{where}.{_short(k, 40)}") for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((v, f"{where}[{i}]") for i, v in enumerate(node))
    return found


_OPCODE = {"bytecode": "Lambda", "import": "module", "file": "file", "pickle": "torch.load"}


def keras_report(path: str, fmt: str, configs: list[tuple[str, object]], loader: str) -> dict[str, Any]:
    """The scan report of Keras configs (the rules above): bytecode, standard-library or non-modeling imports and
    tokenizer files are unsafe, a module of another package suspicious ("unknown"), nothing imported to find out."""
    record = {f: source for source, config in configs for f in config_findings(config, source, path)}
    found = sorted(record, key=lambda f: f.where)
    bytecode = [f for f in found if f.kind == "bytecode"]
    imports = [f for f in found if f.kind == "import"]
    custom = [f for f in found if f.kind == "custom"]
    files = [f for f in found if f.kind == "file"]
    pickles = [f for f in found if f.kind == "pickle"]

    def listed(fs: list[KerasFinding]) -> str:
        shown = "; ".join(f"{f.where}: {f.what}" for f in fs[:4])
        return shown + (f" ... ({len(fs)} in all)" if len(fs) > 4 else "")
    parts = []
    if imports:
        parts.append(f"UNSAFE: {loader} would import (and may call) {listed(imports)} (keras before 3.9, or 3.11 for "
                     "keras.* non-modeling APIs, does so even with safe_mode=True)")
    if bytecode:
        parts.append(("UNSAFE: " if not imports else "") + f"{loader}(safe_mode=False) would run the Python bytecode of: "
                     + listed(bytecode))
    if pickles:
        parts.append(("UNSAFE: " if not parts else "") + f"{loader}(safe_mode=False) would unpickle, with "
                     f"torch.load(weights_only=False): {listed(pickles)}")
    if files:
        parts.append(("UNSAFE: " if not parts else "") + f"{loader} would read files outside the model: {listed(files)}")
    if custom:
        parts.append(("SUSPICIOUS: " if not parts else "") + f"modules outside Keras: {listed(custom)}; keras before 3.9 "
                     "imports them even with safe_mode=True (their code runs); vet them before loading")
    verdict = " | ".join(parts) if parts else \
        "safe: the config holds no Lambda layer or __lambda__ function and names only Keras' own modules"
    return plain_report(
        path, fmt, f"not torch.load's: {loader} rebuilds the model from its config (safe_mode=True, the default, "
        "refuses lambdas; keras 3.9+ imports only Keras' own packages)",
        [{"record": record[f], "offset": 0, "file_offset": None, "opcode": _OPCODE[f.kind],
          "global": f"{f.where}: {f.what}", "why": f.why} for f in bytecode + imports + pickles + files],
        sorted({f.what for f in imports} | ({"keras Lambda (marshalled bytecode)"} if bytecode else set())
               | ({"keras TorchModuleWrapper (a pickled torch module)"} if pickles else set())
               | ({"a vocabulary or tokenizer file read"} if files else set())),
        [f"{f.where}: {f.what}: {f.why}" for f in custom], [], verdict)
