#!/bin/bash
# The checks a lent GPU machine runs in one call (docs/run.md "GPU", bench/results/gpu_memory.md), from the repo root:
#   bash bench/gpu_check.sh        # $OUT: where the results go (the device tool's folder)
# The machine's image has torch (CUDA) and transformers but no registry: .whl/ carries transformers 5.25 and its
# needs, and typer 0.28 for ckptstat's CLI (fetched beforehand with pip download; see docs/testing.md).
set -u
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1   # no network there: nothing fetched (kernels from the Hub)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
if PYTHONPATH=/tmp/site python3 -c "import transformers as T; T.LlamaConfig(); print('transformers', T.__version__)"; then
    export PYTHONPATH=/tmp/site:$PWD
else
    echo "the carried transformers does not import here: the image's, with typer 0.28 alone"
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site2 .whl/typer-*.whl
    export PYTHONPATH=/tmp/site2:$PWD
fi
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
echo "== cuda saves"; timeout 60 python3 fixtures/make_cuda_saves.py /tmp/cuda && tar -C /tmp -cf "$OUT/cuda_saves.tar" cuda
echo "== memory"; timeout 270 python3 bench/gpu_memory.py measure --out "$OUT"
echo "== executor tests"; timeout 120 python3 -m pytest tests/test_executor.py -p no:cacheprovider -q -n 0 -k cuda -W ignore 2>&1 | tail -40
echo "== executor at size"; timeout 120 python3 bench/gpu_executor.py "$OUT/run.json"
echo "== done"
