#!/bin/bash
# Issue 35's page-cache and loopback rows on a machine of more cores than the development host's 2 (a lent GPU
# machine's 16: docs/performance.md), in one call, from the repo root:
#   bash bench/host_check.sh [stats|remote]   # both by default; $OUT: where the results go (the device tool's folder)
# The machine's image has torch, numpy and a C compiler but no registry: .whl/ and .whl/host/ carry transformers 5.25
# (bench/gpu_check.sh's) and what ckptstat's remote reads and these benches need beyond the image (docs/testing.md).
set -u
PART=${1:-all}
OUT=${OUT:-/tmp/host-out}
mkdir -p "$OUT"
exec > >(tee "$OUT/host_log.txt") 2>&1
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1
nproc; python3 --version; lscpu | grep -E "Model name|^CPU\(s\)" ; free -g | head -2
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl .whl/host/*.whl
export PYTHONPATH=/tmp/site:$PWD
# the compiled count, for this machine's Python (the one here is built for the development host's)
rm -f ckptstat/analysis/stats/_count16*.so
python3 setup.py -q build_ext --inplace 2>&1 | tail -3
python3 -c "from ckptstat.analysis.stats import _count16; print('compiled count:', _count16.__file__)" || echo "NO COMPILED COUNT: numpy's"
[ "$PART" = remote ] || { echo "== stats against cat"; timeout 300 python3 bench/stats_kernels.py --size-mb 2048 --only workers --repeat 3 \
    --more-workers 4,8 --out "$OUT/stats_cat_2048_16cores.md"; }
# .whl/before.tar.gz, if there (`git archive REV ckptstat | gzip`): another tree's remote stats beside this one's
BEFORE=()
if [ -f .whl/before.tar.gz ]; then
    mkdir -p /tmp/before && tar -xzf .whl/before.tar.gz -C /tmp/before \
        && cp ckptstat/analysis/stats/_count16*.so /tmp/before/ckptstat/analysis/stats/ && BEFORE=(--before /tmp/before)
fi
[ "$PART" = stats ] || { echo "== remote stats at loopback speed"; timeout 300 python3 bench/remote_latency.py --skip-summary --repeat 3 \
    ${BEFORE[@]+"${BEFORE[@]}"} --out "$OUT/remote_stats_16cores.md"; }
echo "== done"
