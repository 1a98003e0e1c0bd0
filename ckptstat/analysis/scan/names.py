"""The file names `ckptstat scan` judges whatever their bytes: a name that says pickle (or Keras 2 model) is listed in a
folder scan even when no loader can read it (analysis/scan/__init__.py), and an archive's member of such a name, or
of a config's or code's name, is always extracted to be judged (analysis/scan/archive.py)."""
from __future__ import annotations

EXTENSIONS = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle", ".npy", ".npz", ".keras", ".pt2", ".joblib", ".gguf",
              ".jinja", ".nemo")
KERAS_H5 = (".h5", ".hdf5")   # Keras 2 model files (analysis/scan/loaders.py)
TEXT = (".json", ".jinja", ".py", ".yaml", ".yml")   # configs, templates and code scan reads as text


def pickle_named(path: str) -> bool:
    """A name that says pickle (or Keras 2 model): such a file is listed even when no loader can read it."""
    return path.lower().endswith(EXTENSIONS + KERAS_H5)
