"""The fuzz suite for orbax folders (formats/orbax/), from the folders orbax-checkpoint and tensorstore wrote
(fixtures/make_orbax.py): any file's bytes mutated; the manifest's body decompressed, mutated and re-encoded with a
valid length and crc32c (so the mutation reaches the parser behind the checksum); the B+tree root's body likewise,
behind a hand-built manifest pointing at it (its children still the fixture's nodes); zarr metadata mutated or
replaced by hostile JSON. Same contract as the rest of the suite (fuzzlib.check: only CkptstatError, bounded memory
and work, nothing written); a failing case prints its reproduction blob."""
from __future__ import annotations

import json
import os

from hypothesis import given
from hypothesis import strategies as st

from .fuzzlib import Case, check, fuzz_settings, mutate, read
from .layouts import OCDBT_BTREE, OCDBT_MANIFEST, ocdbt_body, ocdbt_encoded, ocdbt_manifest
from .test_fuzz_readers_more import HOSTILE_JSON, _files

ORBAX_FIXTURES = ["train", "dtypes-zarr3", "no-ocdbt", "sharded", "tensorstore-grids", "numbered-manifest"]


def _root_node(files: dict[str, bytes]) -> tuple[str, bytes] | None:
    """The merged B+tree root orbax writes into the item's top-level d/ (the first node of its one file there)."""
    top = sorted(f for f in files if f.startswith("d/") and files[f][:4] == OCDBT_BTREE.to_bytes(4, "big"))
    if not top:
        return None
    data = files[top[0]]
    return top[0], data[:int.from_bytes(data[4:12], "little")]


@fuzz_settings(150)
@given(st.data())
def test_fuzz_orbax(data):
    name = data.draw(st.sampled_from(ORBAX_FIXTURES))
    files = _files(os.path.join("orbax", name))
    manifests = sorted(f for f in files if os.path.basename(f) == "manifest.ocdbt")
    zarr_meta = sorted(f for f in files if os.path.basename(f) in (".zarray", "zarr.json"))
    kinds = ["file bytes", "file bytes"] + (["manifest body", "root body"] if manifests else []) + \
        (["zarr json", "hostile json"] if zarr_meta else [])
    what = data.draw(st.sampled_from(kinds))
    if what == "file bytes":
        f = data.draw(st.sampled_from(sorted(files)))
        files[f] = data.draw(mutate(files[f]))[1]
    elif what == "manifest body":
        f = data.draw(st.sampled_from(manifests))
        files[f] = ocdbt_encoded(OCDBT_MANIFEST, data.draw(mutate(ocdbt_body(files[f])))[1])
    elif what == "root body":
        found = _root_node(files)
        if found is not None:
            body = ocdbt_body(found[1])
            node = ocdbt_encoded(OCDBT_BTREE, data.draw(mutate(body))[1])
            files["d/fuzzed-root"] = node
            files["manifest.ocdbt"] = ocdbt_manifest("d/fuzzed-root", 0, len(node), body[0])
    elif what == "zarr json":
        f = data.draw(st.sampled_from(zarr_meta))
        meta = json.loads(files[f])
        key = data.draw(st.sampled_from(sorted(meta)))
        meta[key] = data.draw(st.sampled_from([None, -1, 0, 2**63, 2**64, [], [2**40], [0], "x", {"id": "blosc"},
                                               [1] * 65, meta[key]]))
        files[f] = json.dumps(meta).encode()
    else:
        files[data.draw(st.sampled_from(zarr_meta))] = data.draw(st.sampled_from(HOSTILE_JSON))
    with Case() as c:
        for f, blob in files.items():
            c.write(f, blob)
        check("orbax", c.dir)


def test_unmutated_orbax_fixtures_pass_the_contract():
    for name in ORBAX_FIXTURES:
        with Case() as c:
            for f, blob in _files(os.path.join("orbax", name)).items():
                c.write(f, blob)
            reply = check("orbax (valid)", c.dir)
            assert reply["outcome"] == "ok" and reply["read"] > 0, (name, reply)


def test_the_root_node_re_encoded_uncompressed_reads_as_the_fixture():
    """The re-encoding the mutations go through changes nothing by itself."""
    files = _files(os.path.join("orbax", "train"))
    name, node = _root_node(files)
    body = ocdbt_body(node)
    files["d/fuzzed-root"] = ocdbt_encoded(OCDBT_BTREE, body)
    files["manifest.ocdbt"] = ocdbt_manifest("d/fuzzed-root", 0, len(files["d/fuzzed-root"]), body[0])
    assert name and read("orbax", "train", name)
    with Case() as c:
        for f, blob in files.items():
            c.write(f, blob)
        reply = check("orbax (re-encoded)", c.dir)
        assert reply["outcome"] == "ok" and reply["read"] > 0, reply

