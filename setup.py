"""The one compiled part of ckptstat: the 16-bit pattern count of `stats` (ckptstat/analysis/stats/_count16.c).

Everything else is in pyproject.toml. The extension is optional: an install without a C compiler still succeeds, and
kernel16.py counts with numpy instead (the same counts, several times the CPU: docs/performance.md, "A compiled count")."""
from setuptools import Extension, setup

setup(ext_modules=[Extension("ckptstat.analysis.stats._count16", ["ckptstat/analysis/stats/_count16.c"],
                             optional=True)])
