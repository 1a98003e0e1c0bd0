"""Fourth red-team pass (docs/security.md, "Checks added by the fourth red-team pass"): Keras configs that
name modules Keras would import, CSV formula injection. The Keras files are written by keras itself (torch
backend) at test time; the hostile variants edit the config keras wrote."""
from __future__ import annotations

import csv
import io
import json
import os
import sys
import zipfile
from pathlib import Path

import h5py
import library_runner
import numpy as np
import pytest
from safetensors.numpy import save_file

LAYER_MODULE = "ckptstat_wave4_layers"   # a throwaway module, written to tmp_path (never imported by ckptstat)
LAYER_SOURCE = '''import keras


@keras.saving.register_keras_serializable(package="Wave4")
class Scale(keras.layers.Layer):
    def call(self, x):
        return x * 2.0
'''


@pytest.fixture(scope="module")
def keras_files(tmp_path_factory) -> dict[str, object]:
    """A plain and a custom-layer model, each saved by keras to .keras and .h5; the custom layer's serialized
    form (module, class_name) as keras writes it."""
    d = tmp_path_factory.mktemp("keras")
    os.environ.setdefault("KERAS_BACKEND", "torch")   # read when keras is first imported; TF is not installed
    os.environ.setdefault("KERAS_HOME", str(d / "home"))   # keras writes its keras.json there, not in ~/.keras
    import keras
    (d / f"{LAYER_MODULE}.py").write_text(LAYER_SOURCE)
    sys.path.insert(0, str(d))
    try:
        layers = __import__(LAYER_MODULE)
        out: dict[str, object] = {}
        plain = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, activation="relu")])
        custom = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2), layers.Scale()])
        for name, model in (("plain", plain), ("custom", custom)):
            for ext in ("keras", "h5"):
                model.save(d / f"{name}.{ext}")
                out[f"{name}.{ext}"] = str(d / f"{name}.{ext}")
        out["scale"] = keras.saving.serialize_keras_object(layers.Scale())
        out["relu"] = keras.saving.serialize_keras_object(keras.activations.relu)
    finally:
        sys.path.remove(str(d))
        sys.modules.pop(LAYER_MODULE, None)
    return out


def _edited(src: str, dst: Path, edit) -> str:
    """A copy of a keras-written .keras archive whose config.json `edit(config)` changed."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info)
            if info.filename == "config.json":
                config = json.loads(data)
                edit(config)
                data = json.dumps(config).encode()
            zout.writestr(info, data)
    return str(dst)


def _scan(cli, path: str) -> tuple[int, dict, str]:
    rc, out, _ = cli("scan", path, "--json")
    rc2, text, err = cli("scan", path)
    assert rc2 == rc and "Traceback" not in text + err
    return rc, json.loads(out), text


def test_keras_written_models_without_foreign_modules_are_safe(cli, keras_files):
    for name in ("plain.keras", "plain.h5"):
        rc, r, _ = _scan(cli, keras_files[name])
        assert rc == 0 and r["status"] == "safe", (name, r["verdict"])
    # keras' own serialized form of a builtin activation names module `builtins`: Keras' lookup, no import
    rc, r, _ = _scan(cli, _edited(keras_files["plain.keras"], Path(keras_files["plain.keras"]).with_name("relu.keras"),
                                  lambda c: c["config"]["layers"][1]["config"].update(activation=keras_files["relu"])))
    assert rc == 0 and r["status"] == "safe", r["verdict"]


def test_custom_layer_module_is_suspicious(cli, keras_files):
    """Escaped before: a .keras whose config names a module outside Keras was "safe"; keras < 3.9 imports it on
    load, safe_mode on (serialization_lib `_retrieve_class_or_fn`). Now: suspicious (status unknown), named."""
    scale = keras_files["scale"]
    assert isinstance(scale, dict)
    rc, r, text = _scan(cli, keras_files["custom.keras"])
    assert rc == 1 and r["status"] == "unknown" and r["would_run_code"]
    assert any(f"{scale['module']}.{scale['class_name']}" in why for why in r["unknown"])
    assert "SUSPICIOUS" in text and scale["module"] in text and "safe_mode" in text
    # the legacy .h5 keras writes names the class by its registered name only: nothing for keras to import
    rc, r, _ = _scan(cli, keras_files["custom.h5"])
    assert rc == 0 and r["status"] == "safe" and r["format"] == "keras (h5)", r["verdict"]


HOSTILE = {
    # a layer whose module is the standard library's: keras < 3.9 imports it and calls Popen.from_config...
    "subprocess": (lambda c: c["config"]["layers"][2].update(module="subprocess", class_name="Popen",
                                                             registered_name=None), "subprocess.Popen"),
    # an activation that is Python's eval, found in `builtins` by keras < 3.9 and called on the layer's input
    "builtins": (lambda c: c["config"]["layers"][1]["config"].update(
        activation={"module": "builtins", "class_name": "function", "config": "eval", "registered_name": "function"}),
        "builtins.eval"),
    "os": (lambda c: c["config"]["layers"][1]["config"].update(
        kernel_initializer={"module": "os", "class_name": "function", "config": "system", "registered_name": None}),
        "os.system"),
    # a Keras API that is no model part (CVE-2025-8747's get_file), refused only by keras >= 3.11
    "get_file": (lambda c: c["config"]["layers"][1]["config"].update(
        bias_initializer={"module": "keras.utils", "class_name": "function", "config": "get_file",
                          "registered_name": None}), "keras.utils.get_file"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_keras_configs_importing_standard_modules_are_unsafe(cli, keras_files, tmp_path, case):
    """Escaped before: "safe" (only Lambda bytecode was looked for). Now UNSAFE, the module and name given,
    and whether safe_mode stops it."""
    edit, what = HOSTILE[case]
    path = _edited(str(keras_files["custom.keras"]), tmp_path / f"{case}.keras", edit)
    rc, r, text = _scan(cli, path)
    assert rc == 1 and r["status"] == "unsafe" and what in r["unsafe_globals"], r["verdict"]
    assert "UNSAFE" in text and what in text and "safe_mode" in text
    assert any(what in f["global"] for f in r["findings"])


def test_keras_h5_model_config_is_scanned(cli, keras_files, tmp_path):
    """A Keras 2 .h5's model_config (legacy_h5_format.py) gets the same walk; a folder scan includes .h5 files."""
    path = tmp_path / "evil.h5"
    path.write_bytes(Path(str(keras_files["plain.h5"])).read_bytes())
    with h5py.File(path, "r+") as f:
        config = json.loads(f.attrs["model_config"])
        config["config"]["layers"][1]["config"]["activation"] = {"module": "os", "class_name": "function",
                                                                 "config": "system"}
        f.attrs["model_config"] = json.dumps(config)
    rc, r, _ = _scan(cli, str(path))
    assert rc == 1 and r["status"] == "unsafe" and "os.system" in r["unsafe_globals"]
    weights = tmp_path / "w.weights.h5"
    with h5py.File(weights, "w") as f:
        f.create_dataset("x", data=np.zeros(3, np.float32))
    rc, out, _ = cli("scan", str(tmp_path), "--json")
    assert rc == 1 and {f["path"]: f["status"] for f in json.loads(out)["files"]} == {"evil.h5": "unsafe",
                                                                                      "w.weights.h5": "safe"}


def test_summary_of_hostile_keras_imports_nothing(cli, keras_files, tmp_path):
    """`summary` reads the config's class_name only: the hostile archives load, and nothing is imported."""
    before = set(sys.modules)
    for case, (edit, _) in HOSTILE.items():
        path = _edited(str(keras_files["custom.keras"]), tmp_path / f"{case}.keras", edit)
        rc, _, err = cli("summary", path)
        assert rc == 0 and "Traceback" not in err
    assert LAYER_MODULE not in set(sys.modules) - before


# ---------------------------------------------------------------------------------------------- CSV formula injection
FORMULAS = ["=HYPERLINK(\"http://x\",\"y\")", "+cmd|' /C calc'!A0", "-2+3", "@SUM(A1)", "\tx", "\rx", "plain.weight"]


def test_csv_cells_starting_a_formula_are_quoted(cli, tmp_path):
    """Escaped before: `stats --csv` wrote a tensor named `=HYPERLINK(...)` as it was, a formula in a
    spreadsheet. Now (OWASP): a text cell starting with = + - @ TAB or CR gets a leading `'`; numbers untouched."""
    path = tmp_path / "f.safetensors"
    save_file({name: np.arange(4, dtype=np.float32) - 2 for name in FORMULAS}, str(path))
    rc, out, _ = cli("stats", str(path), "--csv")
    assert rc == 0
    rows = [r for r in csv.DictReader(io.StringIO(out)) if r["level"] == "tensor"]
    names = {r["name"] for r in rows}
    assert names == {"'=HYPERLINK(\"http://x\",\"y\")", "'+cmd|' /C calc'!A0", "'-2+3", "'@SUM(A1)",
                     "\\x09x", "\\x0dx", "plain.weight"}   # TAB and CR are shown as \xNN: they start no formula
    assert all(r["name"][:1] not in "=+-@\t\r" for r in rows)
    assert {float(r["min"]) for r in rows} == {-2.0}   # a negative number stays a number


_LAMBDA_MODEL = '''import os, sys, zipfile
import keras
d, marker = sys.argv[1], sys.argv[2]
f = eval(f"lambda x: (__import__('os').makedirs({marker!r}, exist_ok=True), x)[1]")
inp = keras.Input((3,))
keras.Model(inp, keras.layers.Lambda(f)(inp)).save(os.path.join(d, "saved.keras"))
os.rmdir(marker)
'''
_LOAD = '''import sys, keras
for p in sys.argv[1:]:
    try:
        keras.saving.load_model(p, safe_mode=False)
    except Exception:
        pass
'''


def test_keras_archives_without_model_weights_h5_are_keras(tmp_path):
    """load_model rebuilds the model from config.json (running a Lambda's bytecode with safe_mode=False) before it looks
    for model.weights.h5 or model.weights.npz: a `.keras` holding config.json alone, or beside model.weights.npz, was
    "torch.load raises: its first entry 'metadata.json' is in no folder" (exit 2; sixth red-team pass). Oracle: keras
    itself writes the Lambda model, and its load_model(safe_mode=False) of each variant creates the marker folder."""

    marker = str(tmp_path / "RAN")
    env = {**os.environ, "KERAS_BACKEND": "torch", "KERAS_HOME": str(tmp_path / "home")}
    library_runner.python(_LAMBDA_MODEL, str(tmp_path), marker, env=env, check=True)
    with zipfile.ZipFile(tmp_path / "saved.keras") as z:
        kept = {n: z.read(n) for n in ("metadata.json", "config.json")}
    variants = {"config_only.keras": {}, "npz_weights.keras": {"model.weights.npz": b""}}
    from ckptstat.analysis.scan import scan_path

    for name, extra in variants.items():
        path = tmp_path / "models" / name
        path.parent.mkdir(exist_ok=True)
        with zipfile.ZipFile(path, "w") as z:
            for member, data in {**kept, **extra}.items():
                z.writestr(member, data)
        library_runner.python(_LOAD, str(path), env=env)
        assert os.path.isdir(marker), name
        os.rmdir(marker)
        r = scan_path(str(path))
        assert r["status"] == "unsafe" and r["format"] == "keras (zip)" and "Lambda" in r["unsafe_globals"][0], r
    tree = scan_path(str(tmp_path / "models"))
    assert {f["path"]: f["status"] for f in tree["files"]} == dict.fromkeys(variants, "unsafe")


_USERBLOCK_H5 = '''import os, sys, h5py, keras
d, marker = sys.argv[1], sys.argv[2]
f = eval(f"lambda x: (__import__('os').makedirs({marker!r}, exist_ok=True), x)[1]")
inp = keras.Input((3,))
keras.Model(inp, keras.layers.Lambda(f)(inp)).save(os.path.join(d, "saved.h5"))
os.rmdir(marker)
with h5py.File(os.path.join(d, "saved.h5"), "r") as src, \\
        h5py.File(os.path.join(d, "models", "model.h5"), "w", userblock_size=512) as dst:
    for k, v in src.attrs.items():
        dst.attrs[k] = v
    for k in src:
        src.copy(src[k], dst, name=k)
'''


def test_a_keras_h5_after_a_user_block_is_keras(tmp_path):
    """HDF5 finds its superblock at byte 0 or after a user block (512, 1024, ...): a Keras 2 `.h5` whose Lambda model
    sits after a 512-byte user block was read as torch.load reads it ("the tar has no 'storages' member", exit 2;
    sixth red-team pass). Oracle: keras writes the model, h5py copies it behind a user block, and keras' own
    load_model(safe_mode=False) of the copy creates the marker folder."""

    from ckptstat.analysis.scan import scan_path

    marker = str(tmp_path / "RAN")
    (tmp_path / "models").mkdir()
    env = {**os.environ, "KERAS_BACKEND": "torch", "KERAS_HOME": str(tmp_path / "home")}
    library_runner.python(_USERBLOCK_H5, str(tmp_path), marker, env=env, check=True)
    path = tmp_path / "models" / "model.h5"
    assert path.read_bytes()[:4] != b"\x89HDF"
    library_runner.python(_LOAD, str(path), env=env)
    assert os.path.isdir(marker)
    os.rmdir(marker)
    r = scan_path(str(path))
    assert r["status"] == "unsafe" and r["format"] == "keras (h5)" and "Lambda" in r["unsafe_globals"][0], r
    assert [(f["path"], f["status"]) for f in scan_path(str(tmp_path / "models"))["files"]] == [("model.h5", "unsafe")]
