"""Shared machinery of the fuzz suite: the worker client, the per-format tally, generic mutations.

Each case is a folder of files (a mutated checkpoint). The worker (worker.py) opens it, summarizes
it and reads every tensor's values in small chunks, under an address-space cap and tracemalloc; the
client here checks its reply:
- only CkptstatError subclasses may come out (anything else, or a crash of the worker, is an escape);
- no MemoryError hidden behind one of our errors (the reader tried to allocate what the file claims);
- the traced peak stays under PEAK_BASE + PEAK_FACTOR x the case's bytes (work bounded by the input);
- the case's folder is unchanged (bytes, mtimes, no new files).
Time per case is measured and reported, not asserted (a liveness guard of HANG_S only catches hangs).
"""
from __future__ import annotations

import atexit
import json
import os
import random
import select
import shutil
import struct
import subprocess
import sys
import tempfile
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from hypothesis import HealthCheck, seed, settings
from hypothesis import strategies as st

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
FIX = os.path.join(ROOT, "fixtures")

EXAMPLES = int(os.environ.get("CKPTSTAT_FUZZ_EXAMPLES", "0")) or None


def _seed() -> int | None:
    """CKPTSTAT_FUZZ_SEED: unset, the fixed derandomized run; `random`, a fresh seed (printed in the summary);
    an integer, that seed (with the same CKPTSTAT_FUZZ_EXAMPLES, it replays a random run)."""
    value = os.environ.get("CKPTSTAT_FUZZ_SEED", "").strip()
    if not value:
        return None
    return random.SystemRandom().randrange(1 << 32) if value == "random" else int(value)


SEED = _seed()
T = TypeVar("T")
PEAK_BASE = 16 << 20
PEAK_FACTOR = 16
HANG_S = float(os.environ.get("CKPTSTAT_FUZZ_HANG_S", "300"))
# CKPTSTAT_FUZZ_SLOW_DIR: a folder where a copy of every case slower than CKPTSTAT_FUZZ_SLOW_S (default 1 s) is kept
SLOW_DIR = os.environ.get("CKPTSTAT_FUZZ_SLOW_DIR", "")
SLOW_S = float(os.environ.get("CKPTSTAT_FUZZ_SLOW_S", "1"))


def fuzz_settings(default_examples: int) -> Callable[[T], T]:
    """Fixed seed (derandomize) unless CKPTSTAT_FUZZ_SEED says otherwise, no example database, no deadline
    (time is measured, not asserted)."""
    chosen = settings(max_examples=EXAMPLES or default_examples, derandomize=SEED is None, deadline=None,
                      database=None, suppress_health_check=list(HealthCheck), print_blob=True)

    def apply(test: T) -> T:
        test = chosen(test)
        return test if SEED is None else seed(SEED)(test)
    return apply


# ------------------------------------------------------------------------------------------ tally
@dataclass
class Tally:
    cases: int = 0
    outcomes: Counter = field(default_factory=Counter)
    max_seconds: float = 0.0
    total_seconds: float = 0.0
    max_peak: int = 0
    budget_hits: int = 0
    examples: dict = field(default_factory=dict)   # outcome -> the first message seen


TALLY: dict[str, Tally] = defaultdict(Tally)


def summary_lines() -> list[str]:
    if not TALLY:
        return []
    w = max(28, *(len(f) + 2 for f in TALLY))
    lines = [f"{'format':<{w}}{'cases':>6}{'ok':>6}  {'max s':>6} {'sum s':>6} {'peak MiB':>8}  errors seen"]
    for fmt in sorted(TALLY):
        t = TALLY[fmt]
        errors = ", ".join(f"{k} {n}" for k, n in t.outcomes.most_common() if k != "ok") or "-"
        lines.append(f"{fmt:<{w}}{t.cases:>6}{t.outcomes['ok']:>6}  {t.max_seconds:>6.2f} {t.total_seconds:>6.1f} "
                     f"{t.max_peak / 2**20:>8.1f}  {errors}")
    return lines


# ------------------------------------------------------------------------------------------ worker
class Escape(AssertionError):
    pass


class Worker:
    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.log = tempfile.TemporaryFile()

    def start(self) -> None:
        env = {**os.environ, "PYTHONPATH": ROOT}
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "worker.py")], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log, cwd=ROOT, env=env)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def ask(self, req: dict, hang_s: float = HANG_S) -> dict:
        if self.proc is None or self.proc.poll() is not None:
            self.start()
        assert self.proc and self.proc.stdin and self.proc.stdout
        self.proc.stdin.write((json.dumps(req) + "\n").encode())
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], hang_s)
        line = self.proc.stdout.readline() if ready else b""
        if not line:
            hung = not ready
            self.stop()
            what = f"hung for {hang_s:.0f} s" if hung else "crashed (the worker process died)"
            return {"outcome": "crash", "message": what, "escape": f"{req['path']}: ckptstat {what}",
                    "seconds": 0.0, "peak": 0}
        return json.loads(line)


WORKER = Worker()


def check(fmt: str, path: str, action: str = "open", chunk: int = 256, hang_s: float = HANG_S) -> dict:
    """Run one case through the worker and assert the contract (see module doc)."""
    folder = path if os.path.isdir(path) else os.path.dirname(path)
    case_bytes = sum(os.path.getsize(os.path.join(d, n)) for d, _, names in os.walk(folder) for n in names)
    reply = WORKER.ask({"path": path, "action": action, "chunk": chunk, "budget": 64 * case_bytes + (1 << 20)}, hang_s)
    t = TALLY[fmt]
    t.cases += 1
    t.outcomes[reply["outcome"]] += 1
    t.examples.setdefault(reply["outcome"], reply["message"])
    t.max_seconds = max(t.max_seconds, reply["seconds"])
    t.total_seconds += reply["seconds"]
    t.max_peak = max(t.max_peak, reply["peak"])
    t.budget_hits += bool(reply.get("budget_hit"))
    if SLOW_DIR and reply["seconds"] > SLOW_S:
        keep = os.path.join(SLOW_DIR, f"{fmt}-{t.cases}-{reply['seconds']:.1f}s")
        shutil.copytree(folder, keep, dirs_exist_ok=True)
    if reply["escape"]:
        raise Escape(f"[{fmt}] {reply['outcome']}: {reply['message']}\n{reply['escape']}")
    bound = PEAK_BASE + PEAK_FACTOR * case_bytes
    if reply["peak"] > bound:
        raise Escape(f"[{fmt}] traced peak {reply['peak']:,} B exceeds {bound:,} B for a {case_bytes:,}-byte case "
                     f"({reply['outcome']}: {reply['message']})")
    return reply


class Case:
    """A fresh folder for one case's files, removed afterwards."""

    base = tempfile.mkdtemp(prefix="ckptstat-fuzz-")
    atexit.register(shutil.rmtree, base, ignore_errors=True)   # the cases' parent folder, once the process ends

    def __enter__(self) -> Case:
        self.dir = tempfile.mkdtemp(dir=self.base)
        return self

    def write(self, name: str, data: bytes) -> str:
        p = os.path.join(self.dir, name)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(data)
        return p

    def __exit__(self, *exc: object) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


def read(*parts: str) -> bytes:
    with open(os.path.join(FIX, *parts), "rb") as f:
        return f.read()


# ------------------------------------------------------------------------------------------ mutations
class Blob(bytes):
    """Mutated bytes with a short repr, so a failing example prints its size, head and hash, not
    the whole file (the reproduce_failure blob replays it exactly)."""

    def __repr__(self) -> str:
        import hashlib

        return f"Blob({len(self)} bytes, head {bytes(self[:16])!r}, sha256 {hashlib.sha256(self).hexdigest()[:12]})"


def zipped(members: list[tuple[str, bytes, int]]) -> Blob:
    """A zip of (name, bytes, compression) members in order, repeated names kept (a mutation may duplicate one)."""
    import io
    import warnings
    import zipfile

    buf = io.BytesIO()
    with warnings.catch_warnings(), zipfile.ZipFile(buf, "w") as z:
        warnings.simplefilter("ignore")          # "Duplicate name": intended
        for name, blob, ctype in members:
            z.writestr(zipfile.ZipInfo(name), blob, compress_type=ctype)
    return Blob(buf.getvalue())


def interesting_ints(width: int, size: int) -> list[int]:
    """Values to put in a `width`-byte little-endian length or offset field."""
    top = 1 << (8 * width)
    return sorted({0, 1, top - 1, top // 2 - 1, top // 2, (size * 2) % top, (size + 1) % top, (size - 1) % top,
                   (size * 1000) % top, 0x7FFF % top, 0xFFFF % top})


@st.composite
def mutate(draw: st.DrawFn, base: bytes, boundaries: list[int] = (), fields_: list[tuple[int, int]] = (),
           byteorder: str = "little") -> tuple[str, bytes]:
    """(kind, Blob): `base` truncated at a boundary, bit-flipped, with a length field (of `byteorder`)
    set to an extreme, with a window overwritten, or with a range around a boundary cut out or doubled."""
    data = bytearray(base)
    n = len(data)
    cuts = sorted({min(max(b, 0), n) for b in boundaries} | {0, 1, n - 1})
    kinds = ["truncate", "flip", "overwrite", "splice"] + (["field"] * 2 if fields_ else [])
    kind = draw(st.sampled_from(kinds))
    near = st.sampled_from(cuts).flatmap(lambda c: st.integers(max(c - 8, 0), min(c + 8, n - 1)))
    pos = st.one_of(near, st.integers(0, n - 1))
    if kind == "truncate":
        cut = draw(st.sampled_from(cuts)) + draw(st.integers(-3, 3))
        return kind, Blob(data[: min(max(cut, 0), n - 1)])
    if kind == "flip":
        for _ in range(draw(st.integers(1, 8))):
            data[draw(pos)] ^= 1 << draw(st.integers(0, 7))
        return kind, Blob(data)
    if kind == "field":
        off, width = draw(st.sampled_from(list(fields_)))
        if off + width <= n:
            value = draw(st.sampled_from(interesting_ints(width, n)))
            data[off:off + width] = value.to_bytes(width, byteorder)  # type: ignore[arg-type]
        return kind, Blob(data)
    if kind == "overwrite":
        at = draw(pos)
        data[at:at + 16] = draw(st.binary(min_size=1, max_size=16))
        return kind, Blob(data[:n])
    # splice: delete or duplicate a range next to a boundary (shifts everything after it)
    at = draw(st.sampled_from(cuts))
    length = draw(st.integers(1, 64))
    if draw(st.booleans()):
        del data[at:at + length]
    else:
        data[at:at] = data[at:at + length]
    return kind, Blob(data)


def u64(n: int) -> bytes:
    return struct.pack("<Q", n % (1 << 64))
