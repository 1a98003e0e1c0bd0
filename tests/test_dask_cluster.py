"""`--scheduler tcp://...` against a real Dask cluster started as docs/audit.md tells users to start one:
`dask scheduler` and `dask worker` processes on loopback, `ckptstat audit` and `ckptstat stats` run as
subprocesses, their output compared with a local run's. No Client lives in the test process (issue 32:
a default Client in the test process once hid that `as_completed` found none in the user's).

The workers run in a folder of their own, so a path the client was given relative to its working
directory must reach them absolute. The S3 cluster's workers read the checkpoints from moto's S3 server
themselves (tests/remote_server.py `moto_s3`), the AWS environment inherited as a user's would be."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from ckptstat.analysis.audit import strip_timing
from ckptstat.analysis.stats.cluster import TASKS_PER_WORKER

pytest.importorskip("distributed")
psutil = pytest.importorskip("psutil")

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "fixtures")
from conftest import fixture_script  # noqa: E402

build_zoo = fixture_script("make_zoo").build_zoo

DASK = os.path.join(os.path.dirname(sys.executable), "dask")
WAIT = 120   # seconds: a bound on starting a cluster on a busy machine, never reached when it works


def _wait(what, ready, procs, logs):
    deadline = time.monotonic() + WAIT
    while not ready():
        dead = [p for p in procs if p.poll() is not None]
        if dead or time.monotonic() > deadline:
            text = "\n".join(open(f).read()[-3000:] for f in logs)
            pytest.fail(f"{what}: {'exited' if dead else 'timed out'}\n{text}")
        time.sleep(0.1)


def _stop(proc):
    """The process group this test started (the worker's nannies and their workers with it)."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)


class Cluster:
    """`dask scheduler --port 0` and `dask worker ADDRESS --nworkers N --nthreads 1` for each N of `nworkers`,
    each in its own process group; a `dask worker` process holds its nannies, the worker processes are its
    spawned children."""

    def __init__(self, folder, request, nworkers=(2,)):
        if not os.path.exists(DASK):
            pytest.skip("the dask command (the dask extra) is not installed")
        os.makedirs(folder)
        info, slog, wlog = (os.path.join(folder, n) for n in ("scheduler.json", "scheduler.log", "worker.log"))
        self.scheduler = subprocess.Popen([DASK, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                                           "--scheduler-file", info], cwd=folder, stdout=open(slog, "w"),
                                          stderr=subprocess.STDOUT, start_new_session=True)
        request.addfinalizer(lambda: _stop(self.scheduler))
        _wait("dask scheduler", lambda: os.path.exists(info) and os.path.getsize(info) > 0, [self.scheduler], [slog])
        time.sleep(0.2)   # the file is written whole (json.dump then close); read it once it is closed
        self.address = json.load(open(info))["address"]
        self.workers = []
        for i, n in enumerate(nworkers):
            log = wlog.replace(".log", f"{i}.log")
            self.workers.append(subprocess.Popen(
                [DASK, "worker", self.address, "--nworkers", str(n), "--nthreads", "1", "--no-dashboard",
                 "--memory-limit", "2GiB", "--host", "127.0.0.1"],
                cwd=folder, stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True))
            request.addfinalizer(lambda p=self.workers[-1]: _stop(p))
            _wait("dask worker", lambda log=log, n=n: open(log).read().count("Registered to") >= n,
                  [self.scheduler, self.workers[-1]], [slog, log])
        self.worker = self.workers[0] if self.workers else None

    def worker_pids(self, worker=None):
        return [c.pid for c in psutil.Process((worker or self.worker).pid).children()
                if "multiprocessing.spawn" in " ".join(c.cmdline())]


def ckptstat(*args, cwd=None, **kw):
    return subprocess.Popen([sys.executable, "-m", "ckptstat", *args], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)


def run(*args, cwd=None):
    p = ckptstat(*args, cwd=cwd)
    out, err = p.communicate(timeout=600)
    return p.returncode, out, err


def records(path):
    return {r["path"]: strip_timing(r) for r in map(json.loads, open(path))}


def stats_json(*args, cwd=None):
    rc, out, err = run("stats", *args, "--json", "--no-progress", "--chunk-bytes", "2048", cwd=cwd)
    assert rc == 0, err
    r = json.loads(out)
    r.pop("seconds"), r.pop("workers")
    return r


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("zoo"))
    build_zoo(root)
    return root


@pytest.fixture(scope="module")
def local(zoo, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("local") / "r.jsonl")
    rc, _, err = run("audit", zoo, "--out", out, "--no-progress")
    assert rc == 1, err   # the zoo holds hostile files and broken ties
    return records(out)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, request):
    return Cluster(str(tmp_path_factory.mktemp("dask") / "cluster"), request)


def test_audit_on_the_cluster_equals_local(cluster, zoo, local, tmp_path):
    out = str(tmp_path / "d.jsonl")
    rc, text, err = run("audit", zoo, "--out", out, "--no-progress", "--json", "--scheduler", cluster.address)
    assert rc == 1 and json.loads(text)["records"] == len(local), err
    got = records(out)
    assert got == local
    workers = {r["worker"] for r in map(json.loads, open(out))}
    assert workers and all(w.startswith("tcp://127.0.0.1:") for w in workers)


def test_stats_on_the_cluster_equals_local(cluster, zoo):
    for path in (os.path.join(FIXTURES, "llama-tiny-sharded"), os.path.join(zoo, "raw", "weights-01-float16.safetensors"),
                 os.path.join(FIXTURES, "mlx", "qwen3_moe-8bit")):   # (its quantised weights dequantised on the workers)
        one = stats_json(path)
        assert len(one["tensors"]) > 1
        assert stats_json(path, "--scheduler", cluster.address) == one   # exact: the same bits, not merely close


def test_trend_on_the_cluster_equals_local(cluster):
    """A run's steps read on the workers (relative paths sent absolute): the same report, bit for bit."""
    def trend_json(*args):
        rc, out, err = run("trend", os.path.join("training", "lightning"), "--json", "--no-progress", *args, cwd=FIXTURES)
        assert rc == 0, err
        r = json.loads(out)
        r.pop("seconds"), r.pop("workers")
        return r

    assert trend_json("--scheduler", cluster.address) == trend_json()


def test_relative_paths_reach_the_workers(cluster, tmp_path):
    """The workers run in their own folder: a relative path is sent absolute, the record keeps the user's."""
    assert stats_json("llama-tiny-sharded", "--scheduler", cluster.address, cwd=FIXTURES) == \
        stats_json("llama-tiny-sharded", cwd=FIXTURES)
    out = str(tmp_path / "rel.jsonl")
    rc, _, err = run("audit", "llama-tiny-sharded", "--out", out, "--no-progress", "--scheduler", cluster.address,
                     cwd=FIXTURES)
    assert rc == 0, err
    (rec,) = records(out).values()
    assert rec["path"] == os.path.join("llama-tiny-sharded", "model.safetensors.index.json") and rec["error"] is None


def test_a_relative_root_gives_the_local_records(cluster, zoo, tmp_path):
    """A relative root is sent to the workers absolute: the records' files, errors and scan findings came back
    absolute (21 of a zoo's records differed from a local run's); now spelled as the user gave them."""
    here, name = os.path.split(zoo)
    rc, _, err = run("audit", name, "--out", str(tmp_path / "l.jsonl"), "--no-progress", cwd=here)
    assert rc == 1, err
    rc, _, err = run("audit", name, "--out", str(tmp_path / "d.jsonl"), "--no-progress", "--scheduler", cluster.address,
                     cwd=here)
    assert rc == 1, err
    local = records(str(tmp_path / "l.jsonl"))
    assert records(str(tmp_path / "d.jsonl")) == local and not any(here in json.dumps(r) for r in local.values())


# what the address tests wait for: a port that never answers as a scheduler, a scheduler with no worker
QUICK = ("from ckptstat.analysis.audit import cluster; cluster.CONNECT_SECONDS = 3; cluster.WORKER_SECONDS = 2; "
         "from ckptstat.__main__ import run; run()")


def _audit_at(address, tmp_path):
    p = subprocess.run([sys.executable, "-c", QUICK, "audit", os.path.join(FIXTURES, "bert-tiny"), "--out",
                        str(tmp_path / "a.jsonl"), "--no-progress", "--scheduler", address],
                       capture_output=True, text=True, timeout=WAIT)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "Traceback" not in p.stderr, p.stderr
    assert not os.path.exists(tmp_path / "a.jsonl")
    return p.stderr


def test_an_address_that_is_no_scheduler_is_one_line(tmp_path):
    """A port that accepts and never answers as a scheduler (a web server: the dashboard's 8787 for the scheduler's
    8786) held `audit --scheduler` for good, silent; an address distributed cannot parse was 'internal error', a
    minute in Client.__del__ and a traceback. Each is one line now, within CONNECT_SECONDS."""
    import socket

    web = subprocess.Popen([sys.executable, "-m", "http.server", "0", "--bind", "127.0.0.1"], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True)
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)   # (connections accepted by the kernel, never answered)
    try:
        port = int(web.stdout.readline().split(" port ")[1].split()[0])
        assert "nothing there answered as a Dask scheduler within 3 s" in _audit_at(f"tcp://127.0.0.1:{port}", tmp_path)
        assert "nothing there answered" in _audit_at(f"tcp://127.0.0.1:{silent.getsockname()[1]}", tmp_path)
    finally:
        web.kill()
        silent.close()
    for bad in ("tcp://", "tcp://[::1", "http://127.0.0.1:8786", "inproc://x", "127.0.0.1:8786"):
        err = _audit_at(bad, tmp_path)
        assert "cannot reach the Dask scheduler" in err or "takes a scheduler address" in err, err


def test_an_address_where_nothing_listens_or_no_host_resolves_says_so(tmp_path):
    """A port where nothing listens was tried again for distributed's whole connect timeout (30 s), then 'nothing there
    answered as a Dask scheduler', and a host name that does not resolve 'cannot reach ... timed out': each says what
    it is now, a refused port after REFUSED_SECONDS (a scheduler still starting)."""
    import socket

    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()   # (a port just freed: nothing listens there)
    assert f"connection refused: nothing listens at port {port} of 127.0.0.1" in _audit_at(f"tcp://127.0.0.1:{port}",
                                                                                          tmp_path)
    assert "cannot resolve host 'no-such-host.invalid'" in _audit_at("tcp://no-such-host.invalid:8786", tmp_path)


def test_a_worker_address_or_a_scheduler_without_workers_is_one_line(tmp_path, request):
    lone = Cluster(str(tmp_path / "lone"), request, nworkers=())
    assert "the Dask scheduler has no worker (none joined in 2 s" in _audit_at(lone.address, tmp_path)
    Cluster(str(tmp_path / "one"), request, nworkers=(1,))
    log = open(os.path.join(str(tmp_path / "one"), "worker0.log")).read()
    worker = log.split("Start worker at:")[1].split()[0]
    assert "a Dask Worker answers there, not a scheduler" in _audit_at(worker, tmp_path)


def test_scheduler_killed_mid_audit_keeps_no_verdict_and_resumes(zoo, local, tmp_path, request):
    """SIGKILL the scheduler mid-audit: the records of the checkpoints not done became 'the worker auditing it died 1
    time(s)' errors (no worker died), kept and resumed past by every later run (only --fresh redid them), with 35 lines
    of distributed's tracebacks. Now one line, no record for what was not audited, and a run on a new cluster audits
    exactly the rest."""
    first = Cluster(str(tmp_path / "first"), request)
    out = str(tmp_path / "s.jsonl")
    rc, err, written = _audit_killing(first.address, zoo, out, first.scheduler.pid)
    assert written < len(local), "the audit ended before the kill: nothing was tested"
    assert rc == 1 and err.count("\n") == 1 and "lost the Dask scheduler" in err and "Traceback" not in err, err
    kept = [json.loads(x) for x in open(out)]
    assert len(kept) < len(local) and not any("died" in (r["error"] or "") for r in kept)
    second = Cluster(str(tmp_path / "second"), request)
    rc, text, err = run("audit", zoo, "--out", out, "--no-progress", "--json", "--scheduler", second.address)
    assert rc == 1 and json.loads(text)["run"]["audited"] == len(local) - len(kept), err
    assert records(out) == local


def test_every_worker_lost_mid_audit_is_one_line(zoo, local, tmp_path, request):
    """Every `dask worker` killed mid-audit (the scheduler alive): the tasks waited for a worker for good, the command
    silent. Now, after WORKER_SECONDS with none, one line; the records written are kept, no record for the rest."""
    lone = Cluster(str(tmp_path / "cluster"), request, nworkers=(1,))
    out = str(tmp_path / "w.jsonl")
    # (the worker's whole process group: its nanny and its worker process)
    rc, err, written = _audit_killing(lone.address, zoo, out, lone.worker.pid, kill=os.killpg, quick=True)
    kept = [json.loads(x) for x in open(out)]
    assert written < len(local) and len(kept) < len(local), "the audit ended before the kill: nothing was tested"
    assert rc == 1 and err.count("\n") == 1 and "Traceback" not in err, err
    assert "the Dask scheduler has had no worker for 2 s" in err and not any("died" in (r["error"] or "") for r in kept)


def _audit_killing(address, zoo, out, victim, kill=os.kill, quick=False):
    """`ckptstat audit ZOO --scheduler ADDRESS`, SIGKILLing pid `victim` (None: the client itself) with `kill` once two
    records are written: (exit code, stderr, records written before the kill). `quick`: run with QUICK's short waits."""
    args = ("audit", zoo, "--out", out, "--no-progress", "--scheduler", address)
    p = subprocess.Popen([sys.executable, "-c", QUICK, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True) if quick else ckptstat(*args)
    try:
        deadline = time.monotonic() + WAIT
        while not (os.path.exists(out) and open(out).read().count("\n") >= 2) and p.poll() is None:
            assert time.monotonic() < deadline, "no record came"
            time.sleep(0.01)
        written = open(out).read().count("\n")
        kill(victim or p.pid, signal.SIGKILL)
        _, err = p.communicate(timeout=600)
    finally:
        if p.poll() is None:
            p.kill()
    return p.returncode, err, written


@pytest.fixture(scope="module")
def slow_file(tmp_path_factory):
    """A 96 MiB float32 file, which `stats --chunk-bytes 4096` takes seconds of a worker's time to read."""
    np = pytest.importorskip("numpy")
    from safetensors.numpy import save_file

    path = str(tmp_path_factory.mktemp("slow") / "big.safetensors")
    rng = np.random.default_rng(0)
    save_file({f"t{i}": rng.random(4 << 20, dtype=np.float32) for i in range(6)}, path)
    return path


def _stats_killing(cluster, path, victim, kill):
    """`ckptstat stats PATH --scheduler` on `cluster` with QUICK's short waits, SIGKILLing pid `victim` with `kill` once
    the cluster's worker process is busy reading: (exit code, stderr)."""
    worker = psutil.Process(cluster.worker_pids()[0])
    idle = sum(worker.cpu_times()[:2])
    p = subprocess.Popen([sys.executable, "-c", QUICK, "stats", path, "--no-progress", "--chunk-bytes", "4096",
                          "--scheduler", cluster.address], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + WAIT
        while sum(worker.cpu_times()[:2]) - idle < 0.5 and p.poll() is None:
            assert time.monotonic() < deadline, "the worker never started reading"
            time.sleep(0.05)
        assert p.poll() is None, "stats ended before the kill: nothing was tested"
        kill(victim, signal.SIGKILL)
        _, err = p.communicate(timeout=WAIT)
    finally:
        if p.poll() is None:
            p.kill()
    return p.returncode, err


def test_stats_losing_every_worker_or_its_scheduler_is_one_line(slow_file, tmp_path, request):
    """`stats --scheduler` whose workers are all killed mid-run waited for a worker for good, silent; one whose
    scheduler is killed ended in 'internal error' and 35 lines of distributed's traceback. Each is one line now
    (trend's steps run through the same loop: cluster.py `completed`)."""
    lone = Cluster(str(tmp_path / "lone"), request, nworkers=(1,))
    rc, err = _stats_killing(lone, slow_file, lone.worker.pid, os.killpg)   # (its nanny and its worker process)
    assert rc == 1 and err.count("\n") == 1 and "Traceback" not in err, err
    # (one worker: its TASKS_PER_WORKER tasks, the file's 6 tensors split)
    assert "the Dask scheduler has had no worker for 2 s" in err and f"of {TASKS_PER_WORKER} parts" in err
    other = Cluster(str(tmp_path / "other"), request, nworkers=(1,))
    rc, err = _stats_killing(other, slow_file, other.scheduler.pid, os.kill)
    assert rc == 1 and err.count("\n") == 1 and "Traceback" not in err, err
    assert "lost the Dask scheduler" in err


def test_worker_killed_mid_audit_loses_no_record(cluster, zoo, local, tmp_path):
    """SIGKILL one worker process once the first records are written: the scheduler reschedules what it
    held, its nanny starts another, and every record arrives once, equal to the local run's."""
    out = str(tmp_path / "k.jsonl")
    victim = cluster.worker_pids()[0]
    rc, err, written = _audit_killing(cluster.address, zoo, out, victim)
    assert written < len(local), "the audit ended before the kill: nothing was tested"
    assert rc == 1, err
    lines = [json.loads(x) for x in open(out)]
    assert len(lines) == len(local)   # none lost, none doubled
    assert records(out) == local
    _wait("a restarted worker", lambda: len(cluster.worker_pids()) == 2 and victim not in cluster.worker_pids(),
          [cluster.worker], [])


def test_client_killed_mid_audit_resumes(cluster, zoo, local, tmp_path):
    """SIGKILL the `ckptstat audit` client itself mid-run (the user's terminal closed): the re-run of the same
    command audits only what is missing and the file then holds every record once, equal to the local run's."""
    out = str(tmp_path / "c.jsonl")
    rc, _, written = _audit_killing(cluster.address, zoo, out, None)
    assert rc == -signal.SIGKILL and written < len(local), "the audit ended before the kill: nothing was tested"
    kept = [json.loads(x) for x in open(out) if x.endswith("\n")]
    rc, _, err = run("audit", zoo, "--out", out, "--no-progress", "--scheduler", cluster.address)
    assert rc == 1, err
    lines = [json.loads(x) for x in open(out)]
    assert lines[:len(kept)] == kept   # kept as written, timings included: not audited again
    assert len(lines) == len(local) and records(out) == local


def test_nanny_killed_mid_audit_loses_no_record(zoo, local, tmp_path, request):
    """SIGKILL a whole `dask worker` process (its nanny) of a cluster of two: its worker process is left
    without a nanny, the scheduler moves what it lost to the other, and every record arrives once."""
    two = Cluster(str(tmp_path / "cluster"), request, nworkers=(1, 1))
    out = str(tmp_path / "n.jsonl")
    rc, err, written = _audit_killing(two.address, zoo, out, two.workers[0].pid)
    assert written < len(local), "the audit ended before the kill: nothing was tested"
    assert rc == 1, err
    lines = [json.loads(x) for x in open(out)]
    assert len(lines) == len(local) and records(out) == local


# --- a cluster whose workers read s3:// themselves ---------------------------------------------------

@pytest.fixture(scope="module")
def s3_cluster(zoo, tmp_path_factory, request):
    """moto's S3 server holding the zoo under s3://zoo/models, and a cluster started inside its AWS
    environment (AWS_ENDPOINT_URL and keys), as workers on a machine configured for a bucket would be."""
    pytest.importorskip("moto.server")
    sys.path.insert(0, HERE)
    from remote_server import moto_s3

    files = {"models/" + os.path.relpath(os.path.join(d, n), zoo): os.path.join(d, n)
             for d, _, ns in os.walk(zoo) for n in ns}
    with moto_s3("zoo", files):
        yield Cluster(str(tmp_path_factory.mktemp("dask") / "s3-cluster"), request)


def test_s3_audit_on_the_cluster_equals_local(s3_cluster, tmp_path):
    url = "s3://zoo/models"
    runs = []
    for extra in ([], ["--scheduler", s3_cluster.address]):
        out = str(tmp_path / f"r{len(runs)}.jsonl")
        rc, _, err = run("audit", url, "--out", out, "--no-progress", *extra)
        assert rc == 1, err
        runs.append(records(out))
    assert len(runs[0]) > 50 and all(p.startswith(url) for p in runs[0])
    assert runs[1] == runs[0]


def test_s3_stats_on_the_cluster_equals_local(s3_cluster):
    url = "s3://zoo/models/raw/weights-01-float16.safetensors"
    one = stats_json(url)
    assert len(one["tensors"]) > 1
    fanned = stats_json(url, "--scheduler", s3_cluster.address)
    local_fetched, cluster_fetched = one.pop("fetched"), fanned.pop("fetched")
    assert fanned == one
    # the client's requests (the header, a stamp per file) plus each worker's own open and value reads
    assert cluster_fetched["requests"] > local_fetched["requests"] and cluster_fetched["bytes"] >= local_fetched["bytes"]
