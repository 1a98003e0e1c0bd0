from .commands.quick import run

run()
