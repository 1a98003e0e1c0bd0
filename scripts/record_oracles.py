"""Record the oracle figures (tests/oracle_figures.py) into tests/oracles/<module>.json: run every test module that
uses them with CKPTSTAT_ORACLES=record, so each figure is what the installed torch and transformers compute, and merge
what the test processes kept into one table per module, stamped with those releases. Run after a torch or
transformers upgrade (the lock), or when the summary line says figures are not on record; then commit the tables.

    python scripts/record_oracles.py      # the test modules in USERS: about 12 minutes on 2 cores

Every table is replaced whole (a module may keep figures in another's table: test_layout's saved shapes are
test_families'), so figures no test asks for any more are gone. Exits with pytest's status (a failed test still
records the figures it computed; the ones it did not reach are then computed live by the suite until recorded)."""
from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import oracle_figures  # noqa: E402

# the test modules whose tests ask for figures (a Kind of their own, or test_families' assert_saved_shapes: test_layout)
USERS = ("tests/test_families.py", "tests/test_layout.py", "tests/test_memory_planner.py", "tests/test_walk_vision.py")


def main() -> int:
    shutil.rmtree(oracle_figures.RECORDS, ignore_errors=True)
    env = {**os.environ, "CKPTSTAT_ORACLES": "record"}
    rc = subprocess.call([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *USERS], cwd=ROOT, env=env)
    tables: dict[str, dict] = {}
    for part in sorted(glob.glob(os.path.join(oracle_figures.RECORDS, "*.json"))):   # <module>.<process>.json
        with open(part) as f:
            tables.setdefault(os.path.basename(part).split(".")[0], {}).update(json.load(f))
    for old in glob.glob(os.path.join(oracle_figures.TABLES, "*.json")):
        os.remove(old)
    for module, figures in sorted(tables.items()):
        table = {"generated_by": "scripts/record_oracles.py", "written_by": oracle_figures.installed(),
                 "figures": dict(sorted(figures.items()))}
        with open(os.path.join(oracle_figures.TABLES, module + ".json"), "w") as f:
            json.dump(table, f, indent=0)
            f.write("\n")
        print(f"{module}: {len(figures)} figures, written by {table['written_by']}")
    shutil.rmtree(oracle_figures.RECORDS, ignore_errors=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
