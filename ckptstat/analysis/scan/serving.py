"""Code a model server imports from an archive it unpacks (analysis/scan/archive.py): not a payload in a pickle, but
Python that runs when the model is served, which scan does not vet, so the archive's verdict is unknown, naming it.

- SageMaker's inference toolkits (sagemaker-inference-toolkit, and the PyTorch, Hugging Face and MXNet serving
  containers built on it) extract `model.tar.gz` into /opt/ml/model and, when it holds `code/inference.py` (the
  default of SAGEMAKER_PROGRAM), import it for `model_fn`, `input_fn`, `predict_fn`, `output_fn`; they pip-install
  `code/requirements.txt` first.
- TorchServe unpacks a `.mar` (a zip) and imports the handler its `MAR-INF/MANIFEST.json` names (`model.handler`: a
  built-in such as `image_classifier`, or a module of the archive, `handler.py` or `module:function`), and, for an
  eager model, its `model.modelFile`."""
from __future__ import annotations

import json
import posixpath

from ...core.limits import limits

SAGEMAKER_CODE = "code/inference.py"
SAGEMAKER_REQUIREMENTS = "code/requirements.txt"
MAR_MANIFEST = "MAR-INF/MANIFEST.json"
SERVING_FILES = frozenset({MAR_MANIFEST})   # read here, so extracted whatever their first bytes
TORCHSERVE_BUILTINS = frozenset({"image_classifier", "image_segmenter", "object_detector", "text_classifier",
                                 "text_handler", "vision_handler", "base_handler"})


def serving_code(names: set[str], manifest: str | None) -> tuple[list[str], list[str]]:
    """(unknowns, notes) for an archive whose members are `names` (paths, normalised); `manifest`, the path of its
    extracted MAR-INF/MANIFEST.json, if any."""
    unknown: list[str] = []
    notes: list[str] = []
    if SAGEMAKER_CODE in names:
        unknown.append(f"{SAGEMAKER_CODE}: SageMaker's inference toolkits import it when they serve the model "
                       "(model_fn, input_fn, predict_fn, output_fn); scan does not vet Python")
        if SAGEMAKER_REQUIREMENTS in names:
            notes.append(f"{SAGEMAKER_REQUIREMENTS}: SageMaker's toolkits pip-install it before they import the code")
    if manifest is not None:
        unknown += _torchserve(names, manifest)
    return unknown, notes


def _torchserve(names: set[str], manifest: str) -> list[str]:
    try:
        with open(manifest, "rb") as f:
            data = f.read(limits().config_bytes + 1)
        model = json.loads(data).get("model", {}) if len(data) <= limits().config_bytes else None
    except (OSError, ValueError, RecursionError, AttributeError):
        model = None
    if not isinstance(model, dict):
        return [f"{MAR_MANIFEST}: unreadable, so which handler TorchServe imports is not known"]
    out = []
    handler = model.get("handler")
    if isinstance(handler, str) and handler not in TORCHSERVE_BUILTINS:
        module = handler.split(":", 1)[0]
        module = module if module.endswith(".py") else module.replace(".", "/") + ".py"
        where = "a module of the archive" if posixpath.normpath(module) in names else "a module outside the archive"
        out.append(f"{MAR_MANIFEST}: TorchServe imports the handler {handler[:120]!r} ({where}) when it serves the "
                   "model; scan does not vet Python")
    model_file = model.get("modelFile")
    if isinstance(model_file, str) and model_file:
        out.append(f"{MAR_MANIFEST}: TorchServe imports modelFile {model_file[:120]!r} to build the eager model; scan "
                   "does not vet Python")
    return out
