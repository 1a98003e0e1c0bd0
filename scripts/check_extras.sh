#!/usr/bin/env bash
# Each user extra installed alone in a fresh venv makes its feature work, and the bare install names the
# extra a feature needs (README "Extras"). CI-able: loopback only, no hub. Slow (a venv per extra), so not
# part of the test suite; tests/test_extras.py checks the missing-extra lines on every run.
#
#   scripts/check_extras.sh [EXTRA...]     default: base remote dask parquet zstd nocc
#                                          (nocc: the bare install where no C compiler is found; setup.py's one
#                                          extension is optional, and stats must report the same without it)
#   scripts/check_extras.sh run            also `run`: installs torch's CPU wheel from download.pytorch.org first
#                                          (about 200 MB, then transformers), so it is left out by default
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
extras=("$@")
[ ${#extras[@]} -eq 0 ] && extras=(base remote dask parquet zstd nocc)
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]:-}"; do [ -n "$p" ] && kill -- -"$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
model="$root/fixtures/bert-tiny"

venv() {   # venv NAME SPEC...: a fresh venv with SPEC installed; prints its bin folder
    python3 -m venv "$work/$1" && "$work/$1/bin/pip" install -q --upgrade pip >/dev/null && "$work/$1/bin/pip" install -q "${@:2}" >/dev/null
    echo "$work/$1/bin"
}
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
says_extra() {   # says_extra EXTRA CMD...: the command fails with one line naming the extra
    local err
    if err=$("${@:2}" 2>&1 >/dev/null); then echo "FAIL: '${*:2}' succeeded without the $1 extra"; exit 1; fi
    [ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] && [[ "$err" == *"pip install 'ckptstat[$1]'"* ]] \
        || { echo "FAIL: '${*:2}' without the $1 extra said: $err"; exit 1; }
}

for extra in "${extras[@]}"; do
    echo "== $extra"
    case $extra in
    base)
        bin=$(venv base "$root")
        "$bin/ckptstat" "$model" >/dev/null
        says_extra remote "$bin/ckptstat" summary https://127.0.0.1:9/model.safetensors
        says_extra dask "$bin/ckptstat" stats "$model" --scheduler tcp://127.0.0.1:9 --no-progress
        says_extra parquet "$bin/ckptstat" audit "$model" --out "$work/r.parquet" --no-progress
        says_extra run "$bin/ckptstat" run "$model" --seq 4
        says_extra zstd "$bin/ckptstat" stats "$root/fixtures/dcp/zstd" --no-progress
        ;;
    remote)
        bin=$(venv remote "$root[remote]")
        (cd "$root/tests" && exec setsid python3 -c "
import sys, time
from remote_server import Server
with Server(sys.argv[1]) as s:
    open(sys.argv[2] + '.tmp', 'w').write(s.url)
    __import__('os').replace(sys.argv[2] + '.tmp', sys.argv[2])
    time.sleep(600)" "$root/fixtures" "$work/url") &
        pids+=($!)
        for _ in $(seq 100); do [ -s "$work/url" ] && break; sleep 0.1; done
        url=$(cat "$work/url")
        "$bin/ckptstat" summary "$url/bert-tiny" --json | "$bin/python" -c \
            'import json, sys; assert json.load(sys.stdin)["parameters"]["unique"] > 0'
        ;;
    dask)
        bin=$(venv dask "$root[dask]")
        port=$(free_port)
        (cd "$work" && exec setsid "$bin/dask" scheduler --host 127.0.0.1 --port "$port" --no-dashboard) >"$work/s.log" 2>&1 &
        pids+=($!)
        (cd "$work" && exec setsid "$bin/dask" worker "tcp://127.0.0.1:$port" --nworkers 1 --nthreads 1 --no-dashboard) >"$work/w.log" 2>&1 &
        pids+=($!)
        for _ in $(seq 600); do grep -q "Registered to" "$work/w.log" && break; sleep 0.1; done
        a=$("$bin/ckptstat" stats "$model" --json --no-progress | "$bin/python" -c 'import json, sys; r = json.load(sys.stdin); r.pop("seconds"); r.pop("workers"); print(json.dumps(r, sort_keys=True))')
        b=$("$bin/ckptstat" stats "$model" --json --no-progress --scheduler "tcp://127.0.0.1:$port" | "$bin/python" -c 'import json, sys; r = json.load(sys.stdin); r.pop("seconds"); r.pop("workers"); print(json.dumps(r, sort_keys=True))')
        [ "$a" = "$b" ] || { echo "FAIL: stats --scheduler differs from the local report"; exit 1; }
        ;;
    parquet)
        bin=$(venv parquet "$root[parquet]")
        "$bin/ckptstat" audit "$model" --out "$work/r.parquet" --no-progress >/dev/null
        "$bin/python" -c 'import pyarrow.parquet as pq, sys; assert pq.read_table(sys.argv[1]).num_rows == 1' "$work/r.parquet"
        ;;
    nocc)   # no C compiler: the install succeeds without the compiled count, and stats reports the same as with it
        # each from its own copy of the tracked files, with no wheel cache: setuptools builds in the tree's build/,
        # where one build's extension would be packed into the other's wheel
        for v in nocc cc; do
            mkdir "$work/src-$v" && (cd "$root" && git ls-files -z | xargs -0 tar -c) | tar -x -C "$work/src-$v"
        done
        bin=$(CC=/nonexistent/cc PIP_NO_CACHE_DIR=1 venv nocc "$work/src-nocc")
        cc=$(PIP_NO_CACHE_DIR=1 venv cc "$work/src-cc")
        # (from $work: `python -c` imports a package in the current folder first)
        (cd "$work" && "$bin/python" -c 'from ckptstat.analysis.stats import kernel16; assert kernel16._compiled_count is None')
        (cd "$work" && "$cc/python" -c 'from ckptstat.analysis.stats import kernel16; assert kernel16._compiled_count is not None')
        same='import json, sys; r = json.load(sys.stdin); r.pop("seconds"); print(json.dumps(r, sort_keys=True))'
        for f in "$root/fixtures/dtypes.safetensors" "$root/fixtures/conversions/quantized/llama"; do
            a=$("$bin/ckptstat" stats "$f" --json --no-progress | "$bin/python" -c "$same")
            b=$("$cc/ckptstat" stats "$f" --json --no-progress | "$cc/python" -c "$same")
            [ "$a" = "$b" ] || { echo "FAIL: stats of $f without the compiled count differs from the report with it"; exit 1; }
        done
        ;;
    zstd)   # a DCP folder written through torch's ZStandard extension: its values decompressed
        bin=$(venv zstd "$root[zstd]")
        "$bin/ckptstat" stats "$root/fixtures/dcp/zstd" --json --no-progress | "$bin/python" -c \
            'import json, sys; assert json.load(sys.stdin)["tensors"]'
        ;;
    run)
        bin=$(venv run torch --index-url https://download.pytorch.org/whl/cpu)
        "$bin/pip" install -q "$root[run]" >/dev/null
        "$bin/ckptstat" run "$model" --seq 4 --iters 1 --warmup 0 >/dev/null
        ;;
    *) echo "unknown extra: $extra"; exit 2 ;;
    esac
    echo "ok"
done
