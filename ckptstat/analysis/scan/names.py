"""The file names `ckptstat scan` judges whatever their bytes: a name that says pickle (or Keras 2 model) is listed in a
folder scan even when no loader can read it (analysis/scan/__init__.py), and an archive's member of such a name, or
of a config's or code's name, is always extracted to be judged (analysis/scan/archive.py)."""
from __future__ import annotations

from .hf_config import CONFIGS, KERAS_HUB_METADATA

EXTENSIONS = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle", ".npy", ".npz", ".keras", ".pt2", ".joblib", ".gguf",
              ".jinja", ".nemo")
KERAS_H5 = (".h5", ".hdf5")   # Keras 2 model files (analysis/scan/loaders.py)


def pickle_named(path: str) -> bool:
    """A name that says pickle (or Keras 2 model): such a file is listed even when no loader can read it."""
    return path.lower().endswith(EXTENSIONS + KERAS_H5)


def read_as_text(path: str) -> bool:
    """A config, template or code file scan judges as text (analysis/scan/hf_config.py, chat_templates.py): the
    configs transformers, diffusers, sentence-transformers and KerasHub read by name (and KerasHub's metadata.json,
    which says a folder is a preset), `.jinja` templates, Python a config names."""
    name = path.replace("\\", "/").rsplit("/", 1)[-1]
    return name in CONFIGS or name == KERAS_HUB_METADATA or name.endswith((".jinja", ".py"))
