"""`ckptstat scan` of a NeMo archive (`.nemo`): what NeMo's restore_from runs, found without running anything
(docs/torch.md, "NeMo archives").

A `.nemo` is a tar (gzip-compressed before NeMo 1.7) that NeMo's SaveRestoreConnector (nemo/core/connectors/
save_restore_connector.py) writes with `tarfile.open(path, "w:")` and `tar.add(folder, arcname=".")`, and restores:

1. `_unpack_nemo_file` opens it with `tarfile.open(path, "r:")`, then `"r:gz"` when that raises (`_tar_open`), and
   extracts every member into a temporary folder: `_safe_extract` since NeMo 2.0 (members with an absolute path or
   `..` skipped), links skipped too since 2.2; `tar.extractall` before 2.0, which writes a member wherever its name
   points and through any link an earlier member made.
2. `load_config_and_state_dict` loads `model_config.yaml` with OmegaConf.load and builds the model from it with
   `from_config_dict`: every target the config names is imported and called (analysis/scan/nemo_config.py).
3. `_load_state_dict_from_disk`: `torch.load(model_weights.ckpt, weights_only=False)` (explicit since NeMo 2.2; before,
   torch.load's default, which is weights_only=False before torch 2.6). With model parallelism the file is
   `mp_rank_XX/model_weights.ckpt` or `tp_rank_XX_pp_rank_XXX/model_weights.ckpt` (nemo/utils/model_utils.py
   `inject_model_parallel_rank`); Megatron models may hold a sharded `model_weights/` folder instead
   (nemo/collections/nlp/parts/nlp_overrides.py `NLPSaveRestoreConnector`), whose `common.pt` Megatron's
   dist_checkpointing loads with torch.load and whose `.metadata` torch.distributed.checkpoint reads with pickle.load.

So scan lists the members with Python's tarfile (the reader NeMo uses) over a bounded view of the file, and judges:
each member's path as the extraction writes it (outside the folder, or through a link: unsafe, for the NeMo releases
that do so); `model_config.yaml` by the targets it names; and every member whose name says pickle (`.ckpt`, `.pt`,
`.pth`, `.bin`, `.pkl`, `.pickle`: model_weights.ckpt at any depth, common.pt, artifacts a model's code may
torch.load) along torch.load's path (analysis/scan/torch_load.py `follow`), a DCP `.metadata` by DCP's rules, a
`.nemo` inside by these rules again. A gzip'd archive is decompressed as read (at most `inflate_ratio` x the file +
`expansion_floor` a pass, GZIP_PASSES passes: gzip.GzipFile rewinds to seek back, and so does this; the head and
tail of each member scan reads are kept as the first pass goes by). Past any bound the verdict is unknown.
"""
from __future__ import annotations

import posixpath
import tarfile
from dataclasses import dataclass
from typing import IO, Any, cast

from ...core.io import SeekableReader, Window, pread
from ...core.limits import limits
from ...core.tar import MAX_TAR_MEMBERS, TarHeaderBound, bounded_tarinfo
from ...core.urls import basename, is_url
from ...errors import CkptstatError
from ...formats.dcp import DCP_GLOBALS, is_metadata_head
from ...formats.nemo import CONFIG, WEIGHTS
from ...formats.torch.pickle_machine import Finding, Walk
from .compressed import _Decompressed
from .nemo_config import ConfigVerdict, judge_config
from .torch_load import Trace, follow, report

FORMAT = "NeMo archive (.nemo)"
LOADER = "NeMo's restore_from"
PICKLE_NAMES = (".ckpt", ".pt", ".pth", ".bin", ".pkl", ".pickle")
DCP_ITEM = "torch.distributed.checkpoint.metadata.BytesStorageMetadata"
MAX_TRACED = 1_000             # members traced as torch.load reads them
MAX_NESTING = 2                # a .nemo inside a .nemo inside a .nemo: unknown
GZIP_PASSES = 8
MAX_READ = 64 << 20            # one read of a gzip'd archive's decompressed bytes
_KEEP = 4 << 20                # a traced member's first and last bytes kept as a gzip stream goes by...
_KEEP_TOTAL = 64 << 20         # ...at most this many in all
_RECENT = 1 << 20              # decompressed bytes kept behind the stream's position
_CHUNK = 1 << 16
SHOWN = 20                     # members written outside the folder listed; the rest counted


class _Budget(CkptstatError):
    """A bound of this module (a CkptstatError, so torch.load's trace passes it on rather than taking it for the file's
    error): the verdict is unknown, naming it."""


class _Capped(Window):
    """A Window whose read never allocates more than the bytes it holds (io.RawIOBase.read(n) allocates n first: a
    header claiming a terabyte would)."""

    def read(self, n: int | None = -1) -> bytes:
        data = self.pread(self.size - self.pos if n is None or n < 0 else n, self.pos)
        self.pos += len(data)
        return data

    def pread(self, n: int, offset: int) -> bytes:
        """Up to n bytes at `offset` of the window (core.io.pread: a window of this window)."""
        n = max(0, min(n, self.size - offset))
        return pread(self.f, n, self.start + offset) if n else b""


def _window(f: IO[bytes], start: int, size: int) -> IO[bytes]:
    return cast(IO[bytes], _Capped(f, start, size))


class Inflating(SeekableReader):
    """The decompressed stream of the gzip (or `codec`: bz2, xz) file `f` (`csize` bytes) as a seekable file: a seek
    back past the bytes kept decompresses again from the start, as gzip.GzipFile does (see the module doc for the
    bounds; analysis/scan/archive.py reads a compressed tar through it too)."""

    def __init__(self, f: IO[bytes], csize: int, codec: str = "gzip"):
        super().__init__()
        self.f, self.csize, self.codec = f, csize, codec
        self.bound = limits().inflate_ratio * csize + limits().expansion_floor
        self.size, self.pos, self.passes = self.bound, 0, 0
        self.kept: list[tuple[int, bytearray, int]] = []    # (start, bytes so far, bytes wanted)
        self.kept_bytes = 0
        self.error: str | None = None
        self._rewind()

    def _rewind(self) -> None:
        self.passes += 1
        if self.passes > GZIP_PASSES:
            raise _Budget(f"reading it takes more than {GZIP_PASSES} passes over the {self.codec} stream")
        self.src = _Decompressed(self.f, self.csize, self.codec, self.bound)
        self.at, self.recent, self.recent_at, self.ended = 0, bytearray(), 0, False

    def want(self, start: int, length: int) -> None:
        """Keep bytes [start, start + length) as the stream goes by (those already passed, from the recent ones)."""
        length = min(length, _KEEP)
        if length <= 0 or self.kept_bytes + length > _KEEP_TOTAL or start < self.recent_at:
            return
        have = self.recent[start - self.recent_at:min(self.at, start + length) - self.recent_at] if start < self.at \
            else bytearray()
        self.kept.append((start, bytearray(have), length))
        self.kept_bytes += length

    def _next(self) -> bytes:
        """The stream's next chunk (b"" at its end), copied into the kept regions it crosses and the recent bytes."""
        chunk = self.src._fill(_CHUNK)
        if not chunk:
            self.ended = True
            if self.src.cut:
                raise _Budget(f"the {self.codec} stream inflates past the {self.bound:,} bytes scan decompresses "
                              f"(--limit inflate_ratio=N: x the file + expansion_floor)")
            self.error = self.src.error
            return b""
        s, e = self.at, self.at + len(chunk)
        for start, data, want in self.kept:
            have = start + len(data)
            if len(data) < want and s <= have < e:
                data += chunk[have - s:min(e, start + want) - s]
        self.at = e
        self.recent += chunk
        if len(self.recent) > _RECENT:
            cut = len(self.recent) - _RECENT
            del self.recent[:cut]
            self.recent_at += cut
        return chunk

    def pread(self, n: int, offset: int) -> bytes:
        """Up to n bytes at `offset`: short only where the stream ends; past the bound, _Budget (never a false end)."""
        n = max(0, n)
        if n > MAX_READ:
            raise _Budget(f"a read of {n:,} bytes of the gzip'd archive (scan reads at most {MAX_READ:,} at once)")
        for start, data, _ in self.kept:
            if start <= offset and offset + n <= start + len(data):
                return bytes(data[offset - start:offset - start + n])
        if offset < self.recent_at:
            self._rewind()
        out = bytearray()
        while len(out) < n:
            at = offset + len(out)
            if at < self.at:      # (only at the start: later bytes are taken from each chunk as it comes)
                out += self.recent[at - self.recent_at:at - self.recent_at + n - len(out)]
            elif self.ended:
                break
            else:
                start = self.at
                chunk = self._next()
                if at < start + len(chunk):
                    out += chunk[at - start:at - start + n - len(out)]
        return bytes(out)

    def readinto(self, b: Any) -> int:
        mv = memoryview(b).cast("B")
        data = self.pread(len(mv), self.pos)
        mv[:len(data)] = data
        self.pos += len(data)
        return len(data)

    def read(self, n: int | None = -1) -> bytes:
        data = self.pread(MAX_READ if n is None or n < 0 else n, self.pos)
        self.pos += len(data)
        return data


def _name(path: str) -> str:
    return (basename(path) if is_url(path) else posixpath.basename(path.replace("\\", "/"))).lower()


def _traced(norm: str) -> str | None:
    """How NeMo reads the member at the normalized path `norm` (lower case), or None when scan does not trace it."""
    base = posixpath.basename(norm)
    if base == WEIGHTS:
        return "torch.load(weights_only=False) by restore_from"
    if base == ".metadata":
        return "torch.distributed.checkpoint's pickle.load (a sharded model_weights/)"
    if base.endswith(".nemo"):
        return "a .nemo inside the archive"
    if base.endswith(PICKLE_NAMES):
        return ("torch.load by Megatron's dist_checkpointing (common state)" if base == "common.pt" else
                "torch.load by a model's code (an artifact NeMo extracts beside the weights)")
    return None


def _list(view: IO[bytes], named: bool, gz: Inflating | None,
          t: Trace) -> tuple[list[tarfile.TarInfo], bool] | None:
    """The members tarfile lists (at most MAX_TAR_MEMBERS), and whether the archive holds model_config.yaml; None when
    tarfile cannot open it as a tar, or when it holds no model_config.yaml and its name is not `.nemo`."""
    try:
        tar = tarfile.open(fileobj=view, mode="r:", tarinfo=bounded_tarinfo())
    except (tarfile.TarError, TarHeaderBound):
        return None
    members: list[tarfile.TarInfo] = []
    config = False
    try:
        while True:
            m = tar.next()
            if m is None:
                break
            if len(members) >= MAX_TAR_MEMBERS:
                if not (named or config):
                    return None
                t.unknown.append(f"a tar of more than {MAX_TAR_MEMBERS:,} members: scan lists at most that many")
                break
            members.append(m)
            norm = posixpath.normpath(m.name).lower()
            config = config or norm == CONFIG
            if gz is not None and (norm == CONFIG or _traced(norm)):   # kept as the first pass goes by
                gz.want(m.offset_data, m.size)
                if m.size > _KEEP:
                    gz.want(m.offset_data + m.size - _KEEP, _KEEP)
    except (_Budget, TarHeaderBound) as e:
        if not (named or config):
            return None
        t.unknown.append(f"listing the tar: {e}")
    except tarfile.TarError as e:
        t.notes.append(f"tarfile raises after {len(members):,} member(s) ({e}): NeMo's restore_from raises there, "
                       "having extracted nothing (NeMo 2.0+) or the members before it")
    if not (named or config):
        return None
    return members, config


@dataclass(frozen=True)
class Extractor:
    """Who extracts a tar, and what it does with a member that writes outside its folder, with a link, and with a
    member after a link: the words of extraction's findings (NeMo's restore_from; analysis/scan/archive.py's tools)."""
    outside: str
    through: str
    links_out: str


NEMO_EXTRACTION = Extractor(
    outside="NeMo before 2.0 extracts with tarfile.extractall, which writes it outside the temporary folder, where the "
            "archive's author chose (2.0+ skips it)",
    through="NeMo before 2.2 extracts links, and a member after one is written where it points, outside the temporary "
            "folder (2.2+ skips links)",
    links_out="NeMo before 2.2 extracts them, and whatever then reads them reads files outside it, which scan cannot see")


def extraction(t: Trace, members: list[tarfile.TarInfo], record: str, who: Extractor = NEMO_EXTRACTION) -> dict[str, str]:
    """The paths the extraction writes: outside the folder (NeMo before 2.0), through a link (before 2.2), as findings
    of `t`. Returns the members links point to from a name NeMo reads (model_weights.ckpt -> x: torch.load reads x),
    and how."""
    w = Walk(f"{record} (extraction)", None)
    links: dict[str, bool] = {}        # a link member's path -> whether it points outside the folder
    outside: list[str] = []
    targets: dict[str, str] = {}
    more = 0
    for m in members:
        norm = posixpath.normpath(m.name)
        parts = norm.split("/")
        found: Finding | None = None
        if norm.startswith("/") or ".." in parts:
            found = Finding(m.offset, "tar member", f"writes {m.name[:120]!r}", who.outside)
        elif not (m.issym() or m.islnk()):
            through = next((p for p in ("/".join(parts[:i]) for i in range(1, len(parts) + 1)) if links.get(p)), None)
            if through is not None:
                found = Finding(m.offset, "tar member", f"writes {m.name[:120]!r} through the link {through[:80]!r}",
                                who.through)
        else:
            target = m.linkname
            resolved = posixpath.normpath(posixpath.join(posixpath.dirname(norm), target) if m.issym() else target)
            links[norm] = target.startswith("/") or resolved == ".." or resolved.startswith("../")
            if links[norm]:
                outside.append(f"{m.name[:80]!r} -> {target[:80]!r}")
            elif (how := _traced(norm.lower())) is not None:
                targets[resolved.lower()] = f"{how}, through the link {m.name[:80]!r} (NeMo before 2.2)"
        if found is not None and len(w.findings) < SHOWN:
            w.findings.append(found)
        elif found is not None:
            more += 1
    if outside:
        t.unknown.append(f"{record}: link(s) out of the archive ({', '.join(outside[:3])}): {who.links_out}")
    if more:
        t.notes.append(f"{more:,} more member(s) written outside the folder, not listed")
    if w.findings:
        w.globals = {fd.name: False for fd in w.findings}
        w.counts.update(w.globals.keys())
        t.reach(w)
    return targets


def _config(t: Trace, view: IO[bytes], m: tarfile.TarInfo, where: str) -> ConfigVerdict | None:
    cap = limits().config_bytes
    if m.size > cap:
        t.unknown.append(f"{where}: {m.size:,} bytes, more than the {cap:,} scan reads (--limit config_bytes=N)")
        return None
    view.seek(m.offset_data)
    data = view.read(m.size)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        t.notes.append(f"{where}: not UTF-8: OmegaConf.load raises there, so restore_from builds nothing from it")
        return None
    v = judge_config(text, where)
    w = Walk(f"{where} (hydra / import_class_by_path)", None)
    for x in v.unsafe:
        w.findings.append(Finding(x.line, x.key, x.name, f"line {x.line}, {x.where}: {x.why}"))
        w.globals[x.name] = False
        w.counts[x.name] += 1
    if w.findings:
        t.reach(w)
    if v.imports:
        names = sorted(v.imports)
        t.notes.append(f"{where} names {len(names)} target(s) NeMo imports: {', '.join(names[:12])}"
                       + (" ..." if len(names) > 12 else ""))
    t.unknown += [f"{where} line {x.line}: {x.where}: {x.name}: {x.why}" for x in v.suspicious] + v.unknown
    if v.dropped:
        t.unknown.append(f"{where}: {v.dropped:,} more target(s) or unreadable value(s), not listed")
    return v


def _trace(path: str, view: IO[bytes], gz: Inflating | None, members: list[tarfile.TarInfo], record: str,
           depth: int) -> tuple[Trace, list[ConfigVerdict]]:
    t = Trace(path, format=FORMAT if gz is None else f"{FORMAT[:-1]}, gzip'd tar: NeMo < 1.7)")
    t.reads = (f"{LOADER} extracts the tar, builds the model from {CONFIG} (hydra.utils.instantiate of each _target_, "
               f"import_class_by_path of target) and torch.loads {WEIGHTS} with weights_only=False")
    linked = extraction(t, members, record)
    configs: list[ConfigVerdict] = []
    traced = 0
    size = getattr(view, "size", None)
    for m in members:
        norm = posixpath.normpath(m.name)
        low = norm.lower()
        if not m.isreg() or norm.startswith("/") or ".." in norm.split("/"):
            continue
        how = "config" if low == CONFIG else _traced(low) or linked.get(low)
        if how is None:
            continue
        where = m.name[:200]
        if m.sparse is not None:
            t.unknown.append(f"{where}: a sparse tar member, which scan does not follow")
            continue
        length = m.size if size is None or gz is not None else max(0, min(m.size, size - m.offset_data))
        if length < m.size:
            t.notes.append(f"{where}: cut short ({length:,} of {m.size:,} bytes): tarfile raises extracting it")
        try:
            if how == "config":
                v = _config(t, view, m, where)
                configs += [v] if v is not None else []
                continue
            traced += 1
            if traced > MAX_TRACED:
                t.unknown.append(f"more than {MAX_TRACED:,} members NeMo or a model may load: scan traces that many")
                break
            member = _window(view, m.offset_data, length)
            shift = None if gz is not None else m.offset_data
            if low.endswith(".nemo"):
                _nested(t, path, member, length, where, shift, depth)
                continue
            sub = Trace(where)
            follow(sub, member, length)
            if posixpath.basename(low) == ".metadata" and is_metadata_head(sub.head):
                for w, _ in sub.walks:   # DCP's own metadata classes, as for a .metadata file (analysis/scan/loaders.py)
                    w.findings = [fd for fd in w.findings if fd.name not in DCP_GLOBALS]
                if any(DCP_ITEM in w.globals for w, _ in sub.walks):
                    t.unknown.append(f"{where}: the sharded checkpoint's non-tensor items (.distcp), which torch."
                                     "distributed.checkpoint unpickles with torch.load(weights_only=False), are not "
                                     "traced inside an archive (extract it and scan the folder)")
            t.adopt(sub, f"{where} ({how})", shift)
        except _Budget as e:
            t.unknown.append(f"{where}: {e}")
            break
    if gz is not None and gz.error:
        t.notes.append(f"the gzip stream is damaged ({gz.error}): NeMo's tarfile raises where it reads that far")
    return t, configs


def _nested(t: Trace, path: str, member: IO[bytes], length: int, where: str, shift: int | None, depth: int) -> None:
    if depth >= MAX_NESTING:
        t.unknown.append(f"{where}: a .nemo nested {depth + 1} deep, which scan does not open")
        return
    found = _open(path, member, length, True, depth + 1)
    if found is None:
        t.notes.append(f"{where}: named .nemo, but no tar NeMo reads")
        return
    sub, _ = found
    t.adopt(sub, where, shift)
    t.notes += [f"{where}: {n}" for n in sub.notes]


def _open(path: str, f: IO[bytes], size: int, named: bool, depth: int) -> tuple[Trace, list[ConfigVerdict]] | None:
    """The trace of the archive `f` of `size` bytes, or None when it is no NeMo archive (see judge_nemo)."""
    view = _window(f, 0, size)
    t = Trace(path)
    listed = _list(view, named, None, t)
    gz: Inflating | None = None
    if listed is None:
        if pread(f, 2, 0) != b"\x1f\x8b":
            return None
        gz = Inflating(f, size)
        view = cast(IO[bytes], gz)
        listed = _list(view, named, gz, t)
        if listed is None:
            return None
    members, has_config = listed
    out, configs = _trace(path, view, gz, members, "the archive", depth)
    out.unknown = t.unknown + out.unknown
    out.notes = t.notes + out.notes
    if not has_config:
        out.notes.append(f"no {CONFIG}: restore_from raises before loading the weights (OmegaConf.load finds no file); "
                         f"extract_state_dict_from still torch.loads {WEIGHTS}")
    return out, configs


def judge_nemo(path: str, f: IO[bytes], size: int) -> dict[str, Any] | None:
    """The scan report of a NeMo archive (local or remote `f` of `size` bytes), or None when the file is no tar or
    gzip'd tar tarfile opens, or is one holding no model_config.yaml while its name does not end in `.nemo`."""
    found = _open(path, f, size, _name(path).endswith(".nemo"), 0)
    if found is None:
        return None
    t, configs = found
    imports = sum(len(v.imports) for v in configs)
    safe = (f"safe: {CONFIG} names only NeMo's own and known libraries' modules ({imports} distinct target(s)), and the "
            f"pickles {LOADER} torch.loads import only torch's weights_only allowlist" if configs else
            f"safe: no {CONFIG} ({LOADER} raises before building anything), and the pickles in the archive import only "
            "torch's weights_only allowlist")
    r = report(t, safe=safe, loader=LOADER)
    suspicious = [x for v in configs for x in v.suspicious]
    writes = [fd["global"] for fd in r["findings"] if fd["opcode"] == "tar member"]
    if r["status"] == "unknown" and suspicious:
        names = "; ".join(f"{x.name} (line {x.line})" for x in suspicious[:4])
        others = [u for u in t.unknown if not any(u.endswith(x.why) for x in suspicious)]
        r["verdict"] = (f"SUSPICIOUS: {CONFIG} names modules outside NeMo and the libraries its configs use: {names}"
                        f"{' ...' if len(suspicious) > 4 else ''}; {LOADER} imports them (their code runs) and calls "
                        "them: vet them before loading" + (f" (and: {others[0]})" if others else ""))
    if writes:
        imported = [g for g in r["unsafe_globals"] if g not in writes]
        parts = ([f"{LOADER} would import and may call: {', '.join(imported)}"] if imported else []) + \
                [f"NeMo's extraction {', '.join(writes[:3])}{' ...' if len(writes) > 3 else ''} (NeMo before 2.0 "
                 "writes outside its temporary folder; before 2.2 through links)"]
        r["verdict"] = "UNSAFE: " + "; ".join(parts)
    return r
