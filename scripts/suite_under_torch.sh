#!/usr/bin/env bash
# The suite against a torch release other than the lock's (a newer one users have moved to), every oracle figure
# computed live by that release: a throw-away venv holding the lock's set (requirements/test-constraints.txt) with
# only torch changed, ckptstat installed from this checkout.
#
#     scripts/suite_under_torch.sh 2.15.0 [pytest arguments...]
#
# The lock stays on the release whose CPU wheel the test install takes (docs/testing.md "Newer torch releases");
# PyPI's Linux wheel of another release is the CUDA build: some 3 GB of nvidia-* wheels, run on the CPU here.
# A pip configuration that caps torch (a `constraint` in pip.conf) must be lifted for the run.
# Deselected: the generated tables' own version check (test_saved_table), which names the lock's torch by design;
# regenerate the tables with the venv's python (fixtures/make_{saved,load,buffer,tie}_table.py) and diff them.
set -euo pipefail
version="${1:?usage: scripts/suite_under_torch.sh TORCH_VERSION [pytest arguments...]}"
shift
cd "$(dirname "$0")/.."
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
sed "s/^torch==.*/torch==$version/" requirements/test-constraints.txt > "$tmp/constraints.txt"
python3 -m venv "$tmp/venv"
py="$tmp/venv/bin/python"
"$py" -m pip install -q --upgrade pip
"$py" -m pip install -q -r "$tmp/constraints.txt"    # the lock's set, torch at $version (its runtime wheels with it)
"$py" -m pip install -q --no-deps -e .               # the test extra pins the lock's torch: ckptstat alone
echo "torch $("$py" -c 'import torch; print(torch.__version__)'), transformers $("$py" -c 'import transformers; print(transformers.__version__)')"
CKPTSTAT_ORACLES=live "$py" -m pytest -p no:cacheprovider -W ignore -q \
    --deselect tests/test_saved_table.py::test_written_by_the_installed_libraries_and_read_as_written "$@"
