# The compiled 16-bit pattern count (_count16.c, built by setup.py when a C compiler is at hand).
from typing import Any

def add(bits: Any, hist: Any, /) -> None: ...   # OSError: bits' pages could not be read (a mapped file shrank)
