"""Seeded mutants of a zip's records (bytes changed, cut, inserted; the zip rewritten so its CRCs hold), and what
ckptstat makes of each: read, or which CkptstatError. The fuzz tests of the torch readers (training-script data,
pickled models, TorchScript archives) share it. Not collected by pytest (no test_ prefix)."""
from __future__ import annotations

import random
import zipfile
from collections.abc import Callable


def mutated(data: bytes, rng: random.Random) -> bytes:
    """`data` with 1 to 3 edits: a byte changed (60%), up to 8 bytes cut (20%) or up to 8 random bytes inserted."""
    b = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        pos, op = rng.randrange(len(b)), rng.random()
        if op < 0.6:
            b[pos] = rng.randrange(256)
        elif op < 0.8:
            del b[pos:pos + rng.randint(1, 8)]
        else:
            b[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
    return bytes(b)


def outcomes(source: str, targets: Callable[[str], bool], count: int, seed: int, path: str,
             read: Callable[[str], object]) -> dict[str, int]:
    """How `count` mutants of `source` fared, each with one record `targets` picks mutated, written to `path` and given
    to `read`: {"read": n, "<CkptstatError subclass>": n}; any other exception propagates."""
    from ckptstat.errors import CkptstatError

    with zipfile.ZipFile(source) as src:
        members = [(i.filename, src.read(i)) for i in src.infolist()]
    picked = [n for n, _ in members if targets(n)]
    rng = random.Random(seed)
    out: dict[str, int] = {}
    for _ in range(count):
        target = rng.choice(picked)
        data = mutated(dict(members)[target], rng)
        with zipfile.ZipFile(path, "w") as z:
            for n, d in members:
                z.writestr(n, data if n == target else d)
        try:
            read(path)
            kind = "read"
        except CkptstatError as e:
            kind = type(e).__name__
        out[kind] = out.get(kind, 0) + 1
    return out
