"""ckptstat's version: a leaf module (sources/http.py names it in its User-Agent; the package re-exports it)."""
__version__ = "0.1.0"   # (pyproject.toml's version)
