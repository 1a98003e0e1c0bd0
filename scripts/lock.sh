#!/usr/bin/env bash
# Refresh requirements/test-constraints.txt, the pinned set the README's test install and .ci/run use:
# resolve '.[test]' afresh (no constraints) in a throw-away venv and freeze what pip chose.
# Run it when pyproject's test extra changes or to move the oracles to today's releases, then run the suite.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="$(mktemp -d)/venv"
python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
"$venv/bin/python" -m pip install -q -e '.[test]'
out=requirements/test-constraints.txt
{
    echo "# The test extra's pinned set (pip constraints), written by scripts/lock.sh from a fresh resolve of"
    echo "# '.[test]' on Python $("$venv/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])'), $(date -u +%F)."
    echo "# Install: pip install -e '.[test]' -c $out"
    # torch's CPU wheel carries the local label +cpu; the pin names the release, which any build of it satisfies.
    # A CUDA build's runtime wheels (nvidia-*, cuda-*, triton) are left out: the test install is the CPU wheel.
    "$venv/bin/python" -m pip freeze --exclude-editable | sed 's/+cpu$//' | grep -Ev '^(nvidia-|cuda-|triton==)'
} > "$out"
rm -rf "$(dirname "$venv")"
echo "wrote $out ($(grep -vc '^#' "$out") packages)"
