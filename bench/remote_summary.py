"""Issue 19: the header-only summary of a 7B-shaped sharded checkpoint over loopback HTTP, beside
huggingface_hub's get_safetensors_metadata on the same server.

Builds bench/summary_7b.py's sparse checkpoint (Llama-2-7B shapes, 3 fp16 shards: real headers, data
left as holes) and serves it with tests/remote_server.py, which also stands in for the Hub's API and
resolve routes (HF_ENDPOINT). Then times whole processes, each in a fresh interpreter, in one run:
  ckptstat https        `python -m ckptstat http://127.0.0.1:PORT/model.safetensors.index.json --json`
  ckptstat hf://        `python -m ckptstat hf://bench/llama-7b --json`
  get_safetensors_metadata  `HfApi().get_safetensors_metadata("bench/llama-7b")` and a parameter sum
and counts, on the server, the requests and body bytes each run costs. Every contender gets one
untimed warm-up (which also fills huggingface_hub's download cache with the index, as a real user's
second call would find it).
Usage: python bench/remote_summary.py [--repeat 5] [--out bench/results/remote_summary.md]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))
from _measure import compiled_env, emit, measure  # noqa: E402
from remote_server import Server  # noqa: E402

PARAMS = 6_738_415_616   # LlamaForCausalLM(Llama-2-7B config).parameters(), as summary_7b.py asserts
HUB = """
import sys
from huggingface_hub import HfApi
m = HfApi().get_safetensors_metadata(sys.argv[1])
print(sum(sum(f.parameter_count.values()) for f in m.files_metadata.values()))
"""


def check(cmd: list[str], env: dict, cwd: str) -> int:
    """The parameter count a contender prints as its last line (ckptstat: from its --json report)."""
    if cmd[1] == "-m":
        out = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, check=True).stdout
        return int(json.loads(out)["parameters"]["unique"])
    return int(subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, check=True).stdout.split()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out")
    args = ap.parse_args()
    py = sys.executable
    with tempfile.TemporaryDirectory() as folder, tempfile.TemporaryDirectory() as home:
        # Built in a child, so that this measuring parent stays small (a child's peak RSS starts from its parent's).
        n = int(subprocess.run([py, os.path.join(HERE, "summary_7b.py"), "--build", folder, "--shards", "3"], check=True,
                               capture_output=True, text=True).stdout)
        assert n == PARAMS, n
        total = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))
        # The Hub's resolve route redirects to its CDN, another host (tests/remote_server.py does: huggingface_hub
        # follows a redirect to the same host and then misses the Hub's X-Repo-Commit header): here another port,
        # which ckptstat's redirect policy lets an hf:// read follow with --allow-external (bench/remote_latency.py).
        hub = {"bench/llama-7b": folder}
        with Server(folder, hub=hub) as cdn, Server(folder, hub=hub, cdn=cdn.url) as s:
            env = compiled_env(drop=("HF_TOKEN",))
            env.update(HF_ENDPOINT=s.url, HF_HOME=home, HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_DISABLE_PROGRESS_BARS="1",
                       PYTHONPATH=ROOT)
            contenders = [
                ("ckptstat summary, https://", [py, "-m", "ckptstat", "--json", s.url + "/model.safetensors.index.json"]),
                ("ckptstat summary, hf://", [py, "-m", "ckptstat", "--json", "--allow-external", "hf://bench/llama-7b"]),
                ("huggingface_hub get_safetensors_metadata", [py, "-c", HUB, "bench/llama-7b"]),
                ("python -c pass (interpreter floor)", [py, "-c", "pass"]),
            ]
            rows = []
            for name, cmd in contenders:
                if "floor" not in name:
                    assert check(cmd, env, ROOT) == PARAMS, name   # warm-up, and the answer checked
                s.reset()
                cdn.reset()
                r = measure(cmd, repeat=args.repeat, env=env, cwd=ROOT)
                r["requests"] = sum(sum(x.requests.values()) for x in (s, cdn)) / args.repeat
                r["bytes"] = (s.bytes_sent + cdn.bytes_sent) / args.repeat
                rows.append((name, r))
    base = dict(rows)["huggingface_hub get_safetensors_metadata"]
    lines = ["| contender | wall (median) | peak RSS | requests | bytes sent | time vs hub | RSS vs hub | bytes vs hub |",
             "|---|---|---|---|---|---|---|---|"]
    for name, r in rows:
        def ratio(k: str, r: dict = r) -> str:
            return f"{r[k] / base[k]:.2f}x" if base[k] else "-"
        lines.append(f"| {name} | {r['wall_s']:.3f} s | {r['rss_mib']:.0f} MiB | {r['requests']:.0f} | {r['bytes']:,.0f} | "
                     f"{ratio('wall_s')} | {ratio('rss_mib')} | {ratio('bytes') if r['bytes'] else '-'} |")
    ck = dict(rows)["ckptstat summary, https://"]
    text = (f"Llama-2-7B shapes, 3 fp16 shards, {total / 2**30:.1f} GiB apparent size (sparse), {PARAMS:,} parameters, "
            f"served on loopback by tests/remote_server.py (which also stands in for the Hub: HF_ENDPOINT).\n"
            f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; median of "
            f"{args.repeat} whole-process runs after a checked warm-up; requests and bytes are what the server sent, "
            "per run (a Hub redirect to the CDN counts as two requests).\n\n" + "\n".join(lines) + "\n\n"
            f"ckptstat over https fetched {ck['bytes'] / total:.5%} of the checkpoint's bytes.\n"
            "get_safetensors_metadata downloads the index into the hub cache (the warm-up did; later runs revalidate "
            "it with a HEAD) and reads each shard's first 100,000 bytes; ckptstat reads each shard's first 64 KiB "
            "window and last 8 bytes (the format probe), the index and config.json, and keeps nothing on disk.\n")
    emit(text, args.out)


if __name__ == "__main__":
    main()
