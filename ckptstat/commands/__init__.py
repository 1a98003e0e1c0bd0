"""The commands, one module per group; `cli.py` registers them on the typer app and keeps the one
error boundary."""
