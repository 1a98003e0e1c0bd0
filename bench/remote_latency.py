"""Issue 35: remote checkpoints at a real network's latency. tests/remote_server.py answers every request
after a fixed delay (`stall`, 50 ms: a round trip to a distant Hub); the checkpoint has DeepSeek-V3's shard
count, 163.

summary: bench/summary_7b.py's sparse checkpoint (real headers, data left as holes) with Llama-3.1-405B's
  shapes (LlamaForCausalLM on the meta device: 1,138 tensors, 810 GB of bf16) in 163 shards, read by
    ckptstat https   `python -m ckptstat --json http://127.0.0.1:PORT/model.safetensors.index.json`
    ckptstat hf://   `python -m ckptstat --json hf://bench/big` (the server stands in for the Hub: HF_ENDPOINT)
    get_safetensors_metadata   huggingface_hub's own header reader (threads over the shards), the peer
  at no delay and at 50 ms. The added wall time over the delay is the number of round trips the command
  waited for one after another; the server counts the requests, the body bytes and the most requests it
  answered at once. The goal: 10 round trips after the listing, under 0.1% of the files' bytes.
stats: the same layout at a small size (Llama shapes, hidden 1024, 163 shards, ~1 GB of bf16 values written),
  `ckptstat stats --json URL` at 50 ms, beside what the server itself can send: every shard fetched whole by
  16 threads (urllib), and `stats` of the same folder read locally (the CPU's floor). With `--rates 100,250`, again
  at a server that sends at most that many MB/s, every reply together (a link's bandwidth: the loopback server
  alone is as fast as the client's CPU, so it says nothing of a network's): the https:// stats and the download.
Every run is a fresh process; whole-process wall time (median), peak RSS (max).
Usage: python bench/remote_latency.py [--repeat 3] [--delay 0.05] [--before TREE] [--rates MBPS,...] [--skip-summary]
       [--out bench/results/remote_latency.md]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))
from _measure import compiled_env, emit, measure  # noqa: E402
from remote_server import Server, round_trips  # noqa: E402

SHARDS = 163   # DeepSeek-V3's model-000NN-of-000163.safetensors
LLAMA_405B = dict(vocab_size=128256, hidden_size=16384, intermediate_size=53248, num_hidden_layers=126,
                  num_attention_heads=128, num_key_value_heads=8, max_position_embeddings=131072,
                  torch_dtype="bfloat16", tie_word_embeddings=False)
SMALL = dict(vocab_size=32000, hidden_size=1024, intermediate_size=4096, num_hidden_layers=24, num_attention_heads=16,
             num_key_value_heads=16, max_position_embeddings=4096, torch_dtype="bfloat16", tie_word_embeddings=False)
HUB = """
import sys
from huggingface_hub import HfApi
m = HfApi().get_safetensors_metadata(sys.argv[1])
print(sum(sum(f.parameter_count.values()) for f in m.files_metadata.values()))
"""
FETCH_ALL = """
import sys, urllib.request
from concurrent.futures import ThreadPoolExecutor
def get(u):
    n = 0
    with urllib.request.urlopen(u) as r:
        while piece := r.read(1 << 20):
            n += len(piece)
    return n
with ThreadPoolExecutor(16) as pool:
    print(sum(pool.map(get, sys.argv[1:])))
"""


def build(folder: str, shapes: str, values: bool) -> int:
    """The checkpoint, built in a child (this measuring parent stays small); with values, the holes filled
    with normal bf16 values."""
    code = (f"import sys; sys.path.insert(0, {HERE!r}); import summary_7b, remote_latency as r; "
            f"print(summary_7b.build({folder!r}, 'BF16', {SHARDS}, r.{shapes}))")
    n = int(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout)
    if values:
        fill(folder)
    return n


def fill(folder: str) -> None:
    import numpy as np

    rng = np.random.default_rng(0)
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".safetensors"):
            continue
        path = os.path.join(folder, name)
        with open(path, "r+b") as f:
            start = 8 + struct.unpack("<Q", f.read(8))[0]
            left = os.path.getsize(path) - start
            f.seek(start)
            while left:
                n = min(left, 1 << 24) // 2
                f.write((rng.standard_normal(n, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16).tobytes())
                left -= 2 * n


def parameters(cmd: list[str], env: dict) -> int:
    out = subprocess.run(cmd, env=env, cwd=env["PYTHONPATH"], capture_output=True, text=True, check=True).stdout
    return int(json.loads(out)["parameters"]["unique"]) if "--json" in cmd else int(out.split()[-1])


def run(servers: tuple[Server, ...], cmd: list[str], env: dict, repeat: int) -> dict:
    for s in servers:
        s.reset()
    r = measure(cmd, repeat=repeat, env=env, cwd=env["PYTHONPATH"], timeout=900)   # (-m imports from the cwd first)
    r.update(requests=sum(sum(s.requests.values()) for s in servers) / repeat,
             bytes=sum(s.bytes_sent for s in servers) / repeat, overlap=max(s.max_in_flight for s in servers))
    for s in servers:
        s.reset()
    launched = time.monotonic()
    measure(cmd, repeat=1, env=env, cwd=env["PYTHONPATH"], timeout=900)   # one more run, its requests' chain
    r["chain"] = round_trips(*servers)
    r["phases"] = phases(servers, launched)
    return r


def phases(servers: tuple[Server, ...], launched: float) -> tuple[float, float, float]:
    """Seconds from the launch (time.monotonic() before the launcher's fork: a few ms early) to the first request, the
    first value request (a Range of at least 1 MiB, or a whole file: the download's), and the last answer's end."""
    spans = [(a, b, asked) for s in servers for (a, b), asked in zip(s.spans, s.ranges)]

    def value(asked: str) -> bool:
        m = re.fullmatch(r"bytes=(\d+)-(\d+)", asked)
        return not asked or bool(m and int(m[2]) - int(m[1]) + 1 >= 1 << 20)

    if not spans:   # (a local folder's stats)
        return float("nan"), float("nan"), float("nan")
    first = min(a for a, _, _ in spans) - launched
    first_value = min((a for a, _, asked in spans if value(asked)), default=float("nan")) - launched
    return first, first_value, max(b for _, b, _ in spans) - launched


def summary_rows(folder: str, n: int, delays: list[float], repeat: int, home: str, tree: str) -> list[tuple[str, float, dict]]:
    """The Hub's resolve route redirects to its CDN, another host (huggingface_hub follows a redirect to the same
    host, and then misses the Hub's X-Repo-Commit header): here another port, which ckptstat's redirect policy
    lets an hf:// read follow with --allow-external only (the Hub's CDN hosts are allowed by name)."""
    py = sys.executable
    rows = []
    hub = {"bench/big": folder}
    with Server(folder, hub=hub) as cdn, Server(folder, hub=hub, cdn=cdn.url) as s:
        env = compiled_env(drop=("HF_TOKEN",))
        env.update(HF_ENDPOINT=s.url, HF_HOME=home, HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_DISABLE_PROGRESS_BARS="1",
                   PYTHONPATH=tree)
        contenders = [("ckptstat summary, https://", [py, "-m", "ckptstat", "--json", s.url + "/model.safetensors.index.json"]),
                      ("ckptstat summary, hf://", [py, "-m", "ckptstat", "--json", "--allow-external", "hf://bench/big"]),
                      ("huggingface_hub get_safetensors_metadata", [py, "-c", HUB, "bench/big"])]
        for name, cmd in contenders:
            for delay in delays:
                s.b.stall = cdn.b.stall = delay
                assert parameters(cmd, env) == n, name   # warm-up, and the answer checked against transformers'
                rows.append((name, delay, run((s, cdn), cmd, env, repeat)))
    return rows


def stats_rows(folder: str, delay: float, repeat: int, tree: str, before: str | None = None,
               rate: float = 0.0) -> tuple[list[tuple[str, dict]], int]:
    """The stats contenders over one server; with `rate` (bytes a second, every reply together: a link's bandwidth),
    only the https:// stats and the download, whose ratio is the figure (and `before`'s https:// stats)."""
    py = sys.executable
    shards = sorted(f for f in os.listdir(folder) if f.endswith(".safetensors"))
    size = sum(os.path.getsize(os.path.join(folder, f)) for f in shards)
    rows = []
    with Server(folder, stall=delay, rate=rate) as s:
        env = compiled_env(PYTHONPATH=tree)
        index = s.url + "/model.safetensors.index.json"
        contenders = [("ckptstat stats, https://", [py, "-m", "ckptstat", "stats", "--json", index], env),
                      ("ckptstat stats --workers 2, https://", [py, "-m", "ckptstat", "stats", "--workers", "2",
                                                                "--json", index], env),
                      ("the server's bandwidth: every shard whole, 16 threads",
                       [py, "-c", FETCH_ALL, *(f"{s.url}/{f}" for f in shards)], env),
                      ("ckptstat stats, the local folder", [py, "-m", "ckptstat", "stats", "--json", folder], env)]
        if rate:
            contenders = [contenders[0], contenders[2]]
        if before:   # another tree's stats over the same server, right after this one's: before a change
            benv = compiled_env(PYTHONPATH=before)
            contenders[1:1] = [("ckptstat stats, https:// (--before tree)",
                                [py, "-m", "ckptstat", "stats", "--json", index], benv)]
        for name, cmd, cenv in contenders:
            measure(cmd, repeat=1, env=cenv, cwd=cenv["PYTHONPATH"], timeout=900)   # warm-up: page cache, .pyc
            rows.append((name, run((s,), cmd, cenv, repeat)))
    return rows, size


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--delay", type=float, default=0.05)
    ap.add_argument("--skip-stats", action="store_true")
    ap.add_argument("--skip-summary", action="store_true")
    ap.add_argument("--rates", default="", help="MB/s, comma-separated: stats beside the download again at a server "
                                                 "sending at most that (a link's bandwidth)")
    ap.add_argument("--tree", default=ROOT, help="the ckptstat source tree to measure (another worktree: before a change)")
    ap.add_argument("--before", help="another tree whose `stats` over https:// is measured beside --tree's, same server")
    ap.add_argument("--out")
    args = ap.parse_args()
    load = os.getloadavg()
    text = summary_text(args, load) if not args.skip_summary else ""
    if not args.skip_stats:
        text += stats_text(args, load)
    emit(text, args.out)


def summary_text(args: argparse.Namespace, load: tuple[float, float, float]) -> str:
    d = args.delay
    with tempfile.TemporaryDirectory() as big, tempfile.TemporaryDirectory() as home:
        n = build(big, "LLAMA_405B", values=False)
        total = sum(os.path.getsize(os.path.join(big, f)) for f in os.listdir(big))
        rows = summary_rows(big, n, [0.0, d], args.repeat, home, args.tree)
    walls = {(name, delay): r["wall_s"] for name, delay, r in rows}
    lines = ["| contender | delay | wall (median) | CPU (median) | wall added / delay | requests in sequence | peak RSS "
             "| requests | most at once | bytes sent | of the files |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, delay, r in rows:
        added = f"{(r['wall_s'] - walls[(name, 0.0)]) / d:.1f}" if delay else "-"
        waited = str(r["chain"]) if delay else "-"
        lines.append(f"| {name} | {delay * 1000:.0f} ms | {r['wall_s']:.3f} s | {r['cpu_s']:.2f} s | {added} | {waited} | "
                     f"{r['rss_mib']:.0f} MiB | "
                     f"{r['requests']:.0f} | {r['overlap']} | {r['bytes']:,.0f} | {r['bytes'] / total:.4%} |")
    text = (f"Llama-3.1-405B shapes (LlamaForCausalLM on the meta device), bf16, {SHARDS} shards (DeepSeek-V3's count), "
            f"{total / 1e9:,.0f} GB apparent size (sparse), {n:,} parameters, served by tests/remote_server.py on "
            f"loopback (also the Hub's API and resolve routes: HF_ENDPOINT; its CDN another server), each request "
            f"answered after the delay.\n"
            f"Machine: {platform.machine()}, {os.cpu_count()} cores shared with other jobs (load average "
            f"{load[0]:.1f} at the start), Python {platform.python_version()}; {time.strftime('%Y-%m-%d')}; the tree "
            f"measured: {os.path.relpath(args.tree, ROOT) if args.tree != ROOT else 'this one'}. "
            f"Median of {args.repeat} whole-process runs after a checked warm-up; requests, bytes and the most "
            "requests answered at once are the servers' counts (a Hub redirect to the CDN is two requests); CPU: user "
            "+ sys of the command's process and its workers, the steadier figure on a loaded machine. "
            "`wall added / delay`: (wall at the delay - wall at none) / delay, the round trips the command waited "
            "for one after another, as the wall clock sees them (the machine's load moves it by several); "
            "`requests in sequence`: the same count as the servers saw it in one more run (tests/remote_server.py "
            "`round_trips`: the longest chain of requests each sent after the previous one's answer; for hf://, 2 of "
            "them are the listing, the API's revision and tree).\n\n" + "\n".join(lines) + "\n")
    return text


def stats_text(args: argparse.Namespace, load: tuple[float, float, float]) -> str:
    d, text = args.delay, ""
    rates = [float(r) * 1e6 for r in args.rates.split(",") if r]
    with tempfile.TemporaryDirectory() as small:
        build(small, "SMALL", values=True)
        for rate in [0.0, *rates]:
            srows, size = stats_rows(small, d, args.repeat, args.tree, args.before, rate)
            base = dict(srows)["the server's bandwidth: every shard whole, 16 threads"]["wall_s"]
            # at a capped link: the wall time the link sat idle (the start, the headers' round trips, gaps)
            heads = ["contender", "wall (median)", "CPU (median)", "MB/s", "vs the server's bandwidth", "peak RSS",
                     "requests", "most at once", "requests in sequence",
                     "first request / first value request / last answer's end (s from the launch)"] + (
                     ["link idle (wall - bytes / rate)"] * bool(rate))
            slines = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
            for name, r in srows:
                cells = [name, f"{r['wall_s']:.2f} s", f"{r['cpu_s']:.2f} s", f"{size / r['wall_s'] / 1e6:.0f}",
                         f"{r['wall_s'] / base:.2f}x", f"{r['rss_mib']:.0f} MiB", f"{r['requests']:.0f}",
                         str(r["overlap"]), str(r["chain"]), " / ".join(f"{t:.2f}" for t in r["phases"]).replace("nan", "-")]
                cells += [f"{r['wall_s'] - r['bytes'] / rate:.2f} s"] if rate else []
                slines.append("| " + " | ".join(cells) + " |")
            link = f", sending at most {rate / 1e6:.0f} MB/s (all replies together)" if rate else ""
            text += (f"\n`stats` over {SHARDS} shards of {size / 1e9:.2f} GB of bf16 values (Llama shapes, hidden "
                     f"1024, 24 layers), the server answering after {d * 1000:.0f} ms{link} (load average "
                     f"{load[0]:.1f} at the start):\n\n" + "\n".join(slines) + "\n")
    return text


if __name__ == "__main__":
    main()
