"""The security tests' proofs that a library runs a payload (`python -c CODE ARGS`: keras.saving.load_model,
transformers' pipeline, torch.hub, PackageImporter...), each in a process forked from one warm interpreter that has
imported torch, transformers, keras and diffusers once, instead of a fresh interpreter importing them again (3-8 s a
proof). `python(code, *args, env=...)` returns the exit status, as subprocess.run(...).returncode would.

The child is what `python -c` would be: sys.argv = ["-c", *args], "" first on sys.path, the environment the test gives
(MARKER, TORCH_HOME...), `__name__ == "__main__"`, its stderr kept to report a failure. What a library reads only at
import is the server's: KERAS_BACKEND (torch, which every keras proof here names; a proof asking another backend gets
a fresh interpreter), and the scratch folders KERAS_HOME and HF_MODULES_CACHE, which the server owns (the dynamic
modules' copy emptied before each proof, as a test's own empty folder would be). Proofs run one at a time per test
process; one that outlives TIMEOUT_S is killed by SIGALRM (status -14).

The server is this file run as a script, started by the first `python()` of a test process and stopped at its exit;
one JSON line a request on its stdin, `{"code", "args", "env", "cwd"}`, one JSON line a reply, `{"rc", "err"}`."""
from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading

TIMEOUT_S = 300
# what a library reads once, at import, the server's: keras' backend (a proof must ask for the same) and its own scratch
BACKEND = "KERAS_BACKEND"
SCRATCH = ("KERAS_HOME", "HF_MODULES_CACHE", "LIBRARY_RUNNER_DIR")

_server: subprocess.Popen | None = None
_lock = threading.Lock()


def _start() -> subprocess.Popen:
    scratch = tempfile.mkdtemp(prefix="library-runner-")
    env = {**os.environ, BACKEND: "torch", "KERAS_HOME": os.path.join(scratch, "keras"),
           "HF_MODULES_CACHE": os.path.join(scratch, "modules"), "LIBRARY_RUNNER_DIR": scratch}
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env=env)

    def stop() -> None:
        proc.kill()
        proc.wait()
        shutil.rmtree(scratch, ignore_errors=True)

    atexit.register(stop)
    return proc


def python(code: str, *args: str, env: dict[str, str] | None = None, cwd: str | None = None, check: bool = False) -> int:
    """`python -c code args` under `env` (default: this process's), its exit status; check: raise on non-zero."""
    global _server
    env = dict(os.environ if env is None else env)
    if env.get(BACKEND, "torch") != "torch":
        p = subprocess.run([sys.executable, "-c", code, *args], env=env, cwd=cwd, capture_output=True, text=True,
                           timeout=TIMEOUT_S)
        rc, err = p.returncode, p.stderr
    else:
        with _lock:
            if _server is None or _server.poll() is not None:
                _server = _start()
            assert _server.stdin is not None and _server.stdout is not None
            request = {"code": code, "args": list(args), "cwd": cwd,
                       "env": {k: v for k, v in env.items() if k not in SCRATCH}}
            _server.stdin.write(json.dumps(request) + "\n")
            _server.stdin.flush()
            reply = json.loads(_server.stdout.readline())
        rc, err = reply["rc"], reply["err"]
    if check and rc != 0:
        raise AssertionError(f"python -c exited {rc}: {err[-2000:]}")
    return rc


def _child(request: dict, err_path: str) -> None:
    """In the forked child: become `python -c code args` and exit with its status (never return to the server)."""
    import builtins
    import traceback

    status = 1
    try:
        for key in set(os.environ) - set(request["env"]) - {*SCRATCH, BACKEND}:
            del os.environ[key]
        os.environ.update({k: v for k, v in request["env"].items() if k != BACKEND})
        if request["cwd"]:
            os.chdir(request["cwd"])
        null = os.open(os.devnull, os.O_RDWR)
        err = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(null, 0)
        os.dup2(null, 1)
        os.dup2(err, 2)
        signal.alarm(TIMEOUT_S)
        sys.argv = ["-c", *request["args"]]
        sys.path.insert(0, "")
        try:
            exec(compile(request["code"], "<string>", "exec"), {"__name__": "__main__", "__builtins__": builtins})
            status = 0
        except SystemExit as e:
            status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(status)


def _serve() -> None:
    modules = os.path.join(os.environ["HF_MODULES_CACHE"], "transformers_modules")
    for line in sys.stdin:
        request = json.loads(line)
        shutil.rmtree(modules, ignore_errors=True)
        err_path = os.path.join(os.environ["LIBRARY_RUNNER_DIR"], "stderr")
        pid = os.fork()
        if pid == 0:
            _child(request, err_path)
        _, status = os.waitpid(pid, 0)
        rc = os.waitstatus_to_exitcode(status)
        with open(err_path, errors="replace") as f:
            err = f.read()
        sys.stdout.write(json.dumps({"rc": rc, "err": err[-4000:]}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    sys.path.pop(0)   # (tests/, where this file lies: not on a `python -c`'s path)
    # what the proofs load, imported before the first fork
    import numpy  # noqa: F401
    import torch  # noqa: F401
    import transformers.pipelines  # noqa: F401

    for optional in ("keras", "keras.saving", "diffusers", "h5py"):
        try:
            __import__(optional)
        except ImportError:
            pass
    _serve()
