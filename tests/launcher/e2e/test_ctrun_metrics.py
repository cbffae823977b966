#!/usr/bin/env python3
"""test_ctrun_metrics.py - ctrun's metrics endpoint (--metrics_port) during a real job.

    test_ctrun_metrics.py CTRUN TEST_WORKER

A two-worker job whose rank 1 is killed by an injected fault in attempt 0 and restarts once;
during attempt 1 the test scrapes GET /metrics and parses it with prometheus_client's own
parser (Debian's python3-prometheus-client): Prometheus naming (ctrun_ prefix, _total
counters, base units), the job state, attempt and restarts by cause, workers by state,
per-rank steps, rates and heartbeat ages, the detection-latency histogram, the rendezvous round and
the store's numbers. Then the bounds: /healthz, 404 and 405 answers, an oversized request
header and a malformed request line are refused, an idle connection is closed after the
timeout while 40 of them are open, and scrapes work again once they are gone; the job ends
normally. Without --metrics_port nothing listens. Needs prometheus_client: runs itself under
/usr/bin/python3 (or CTRUN_PROM_PYTHON) when the interpreter it was started with lacks it;
exits 77 when none has it.
"""
import os
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request


def reexec_with_prometheus():
    try:
        import prometheus_client  # noqa: F401
        return
    except ImportError:
        pass
    for py in (os.environ.get("CTRUN_PROM_PYTHON"), "/usr/bin/python3"):
        if (py and os.path.realpath(py) != os.path.realpath(sys.executable)
                and os.access(py, os.X_OK)):
            ok = subprocess.run([py, "-c", "import prometheus_client"], capture_output=True)
            if ok.returncode == 0:
                os.execv(py, [py] + sys.argv)
    print("SKIP: no Python with prometheus_client (Debian: python3-prometheus-client)")
    sys.exit(77)


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


class Job:
    """ctrun in the background; its stderr collected by a thread."""

    def __init__(self, args, env=None):
        self.p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  text=True, env=env)
        self.err = []
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()

    def _read(self):
        for line in self.p.stderr:
            self.err.append(line)

    def text(self):
        return "".join(self.err)

    def wait_for(self, pattern, timeout):
        end = time.time() + timeout
        while time.time() < end:
            m = re.search(pattern, self.text())
            if m:
                return m
            time.sleep(0.02)
        fail("no %r in ctrun's output:\n%s" % (pattern, self.text()))

    def finish(self, timeout):
        try:
            rc = self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
            fail("ctrun did not end within %s s:\n%s" % (timeout, self.text()))
        self.t.join(5)
        return rc


def get(port, path, method="GET"):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), method=method)
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, r.headers.get("Content-Type"), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type"), e.read().decode()


def raw(port, data, timeout=5):
    """Sends data on a new connection; returns what came back until the server closed."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(data)
        out = b""
        while True:
            try:
                chunk = s.recv(65536)
            except (ConnectionResetError, socket.timeout):
                break
            if not chunk:
                break
            out += chunk
        return out
    finally:
        s.close()


def samples(text):
    from prometheus_client.parser import text_string_to_metric_families
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    return fams


def maybe(fams, family, sample=None, **labels):
    f = fams.get(family)
    for s in f.samples if f is not None else []:
        if (sample is None or s.name == sample) and all(s.labels.get(k) == v
                                                        for k, v in labels.items()):
            return s.value
    return None


def value(fams, family, sample=None, **labels):
    v = maybe(fams, family, sample, **labels)
    if v is None:
        fail("no sample %s%s in %s" % (sample or family, labels, fams.get(family)))
    return v


def main():
    reexec_with_prometheus()
    ctrun, worker = sys.argv[1], sys.argv[2]
    env = dict(os.environ)
    for k in ("CTRUN_METRICS_PORT", "CTRUN_METRICS_ADDR", "CT_LOG_LEVEL", "LOGLEVEL"):
        env.pop(k, None)

    # Off by default: nothing says it listens.
    p = subprocess.run([ctrun, "--log_dir=/dev/null", "--no_python", worker], env=env,
                       capture_output=True, text=True, timeout=60)
    if p.returncode != 0 or "metrics endpoint" in p.stderr:
        fail("a job without --metrics_port:\n" + p.stderr)

    job = Job([ctrun, "--metrics_port=0", "--nproc_per_node=2", "--max_restarts=1",
               "--inject=kill:rank=1:at=time=500ms", "--log_dir=/dev/null", "--no_python",
               worker, "--heartbeat", "40", "--heartbeat-ms", "50", "--sleep-ms", "12000"],
              env=env)
    port = int(job.wait_for(r"metrics endpoint at http://127\.0\.0\.1:(\d+)/metrics", 30).group(1))

    # Mid-job, after the restart: attempt 1 with both workers running.
    end = time.time() + 30
    while True:
        status, ctype, text = get(port, "/metrics")
        if status != 200:
            fail("/metrics answered %d" % status)
        fams = samples(text)
        if (maybe(fams, "ctrun_attempt") == 1 and
                maybe(fams, "ctrun_workers", state="running") == 2 and
                maybe(fams, "ctrun_worker_steps_per_second", rank="0") is not None and
                maybe(fams, "ctrun_worker_steps_per_second", rank="1") is not None):
            break
        if time.time() > end:
            fail("no running attempt 1 in the metrics:\n" + text)
        time.sleep(0.1)
    if not ctype.startswith("text/plain; version=0.0.4"):
        fail("content type %r" % ctype)
    for name, f in fams.items():
        if not name.startswith("ctrun_"):
            fail("metric %s lacks the ctrun_ prefix" % name)
        if f.type == "counter" and not all(s.name.endswith("_total") for s in f.samples):
            fail("counter %s has samples without _total" % name)
    checks = [
        (value(fams, "ctrun_job_state", state="running"), 1),
        (value(fams, "ctrun_job_state", state="rendezvous"), 0),
        (value(fams, "ctrun_restart_count"), 1),
        (value(fams, "ctrun_restarts", sample="ctrun_restarts_total"), 1),
        (value(fams, "ctrun_restarts_by_cause", cause="signal"), 1),
        (value(fams, "ctrun_restarts_by_cause", cause="exit"), 0),
        (value(fams, "ctrun_restarts_by_cause", cause="lost_node"), 0),
        (value(fams, "ctrun_rendezvous_round"), 1),
        (value(fams, "ctrun_rendezvous_nodes"), 1),
        (value(fams, "ctrun_store_host"), 1),
    ]
    for got, want in checks:
        if got != want:
            fail("got %s, want %s:\n%s" % (got, want, text))
    # 40 heartbeats 50 ms apart: at most 20 steps per second, fewer on a loaded machine.
    for r in ("0", "1"):
        step = value(fams, "ctrun_worker_last_step", rank=r, local_rank=r)
        rate = value(fams, "ctrun_worker_steps_per_second", rank=r)
        if not (1 <= step <= 40 and 3 <= rate <= 21):
            fail("rank %s: step %s, %s steps/s:\n%s" % (r, step, rate, text))
    age = value(fams, "ctrun_worker_heartbeat_age_seconds", rank="1")
    if not 0 <= age < 30:
        fail("heartbeat age %s" % age)
    hist = fams["ctrun_failure_detection_latency_seconds"]
    if hist.type != "histogram":
        fail("detection latency is a %s" % hist.type)
    buckets = [s.value for s in hist.samples if s.name.endswith("_bucket")]
    if buckets != sorted(buckets) or len(buckets) < 2 or buckets[-1] != 1:
        fail("histogram buckets %s (one injected kill detected)" % buckets)
    if value(fams, "ctrun_failure_detection_latency_seconds",
             sample="ctrun_failure_detection_latency_seconds_count") != 1:
        fail("histogram count:\n" + text)
    # The workers here use no store; the agent's own keys are there, its in-process operations
    # are not requests.
    if value(fams, "ctrun_store_keys") <= 0 or value(fams, "ctrun_store_operations",
                                                      sample="ctrun_store_operations_total") < 0:
        fail("store numbers:\n" + text)

    # The other answers.
    if get(port, "/healthz")[0::2] != (200, "ok\n"):
        fail("/healthz: %s" % (get(port, "/healthz"),))
    if get(port, "/nope")[0] != 404 or get(port, "/metrics", "POST")[0] != 405:
        fail("404/405 answers")
    big = raw(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 100000 + b"\r\n\r\n")
    if b" 200 " in big.split(b"\r\n", 1)[0]:
        fail("a 100 kB header was served")
    bad = raw(port, b"GARBAGE\r\n\r\n")
    if b" 200 " in bad.split(b"\r\n", 1)[0]:
        fail("a malformed request was served")
    # Idle clients beyond the connection limit: the server closes an idle one after its
    # timeout, scrapes work again as soon as they are gone, and the job itself goes on.
    idle = []
    for _ in range(40):
        try:
            idle.append(socket.create_connection(("127.0.0.1", port), timeout=2))
        except OSError:
            break
    t0 = time.time()
    idle[0].settimeout(15)
    try:
        closed = idle[0].recv(1) == b""
    except OSError:
        closed = True
    waited = time.time() - t0
    if not closed or waited > 12:
        fail("an idle connection was still open after %.1f s" % waited)
    print("  the server closed an idle connection after %.1f s" % waited)
    for c in idle:
        c.close()
    t0 = time.time()
    while get(port, "/healthz")[0] != 200:
        if time.time() - t0 > 5:
            fail("no scrape within 5 s of the idle clients leaving")
        time.sleep(0.1)
    rc = job.finish(60)
    if rc != 0:
        fail("the job exited %d:\n%s" % (rc, job.text()))
    print("ok - metrics mid-job after a restart, parsed by prometheus_client; bounds hold")


if __name__ == "__main__":
    main()
