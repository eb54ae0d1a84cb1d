"""A real gateway for the tests: the idemgate binary, built once per run
from this repository (or the one IDEMGATE_TEST_BINARY names), started
as processes on ports the kernel picks.

Nothing here is mocked: the client is tested against ``idemgate serve``
with a SQLite store in a temporary directory, and the writes through the
gateway against the reference upstream (``idemgate opsapi --naive``,
which performs every write it receives and counts it at /v1/effects).

Without Go the tests are skipped, loudly; under CI=true they fail.
"""

import atexit
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.request
from typing import Any, Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
CLIENT_DIR = os.path.dirname(HERE)
REPO = os.path.dirname(os.path.dirname(CLIENT_DIR))

# The principals every gateway here knows: bearer token -> (name, tenant, roles).
TOKENS = {
    "agent-token": ("agent", "acme", ["agent"]),
    "alice-token": ("alice", "acme", ["approver", "admin"]),
    "other-token": ("other", "globex", ["agent"]),
}

_lock = threading.Lock()
_tmp = tempfile.mkdtemp(prefix="idemgate-py-tests-")

# The agents' secret, for both languages' clients (the Python client and
# ``idemgate call`` read it from the environment); and a configuration
# directory of this run's, so that no test makes a secret in the home's.
AGENT_SECRET = "a-python-test-secret-of-more-than-16-bytes"
os.environ["IDEMGATE_AGENT_SECRET"] = AGENT_SECRET
os.environ.pop("IDEMGATE_AGENT_SECRET_FILE", None)
os.environ.pop("IDEMGATE_AGENT", None)
os.environ["XDG_CONFIG_HOME"] = os.path.join(_tmp, "config")
_binary: Optional[str] = None
_warned: List[str] = []  # the loud line about a missing go, said once
_procs: List["Process"] = []


def _cleanup() -> None:
    for p in list(_procs):
        p.kill()
    shutil.rmtree(_tmp, ignore_errors=True)


atexit.register(_cleanup)


def tempdir() -> str:
    """A fresh directory under this run's, removed at exit."""
    return tempfile.mkdtemp(dir=_tmp)


def _given_binary() -> Optional[str]:
    """The binary IDEMGATE_TEST_BINARY names, if it is an executable file
    (make test builds bin/idemgate-test once for every suite); set to
    anything else, a line says so and the tests build their own."""
    given = os.environ.get("IDEMGATE_TEST_BINARY", "")
    if not given:
        return None
    path = os.path.abspath(given)
    if os.path.isfile(path) and os.access(path, os.X_OK):
        return path
    print("\nIDEMGATE_TEST_BINARY=%s is not an executable file; building idemgate instead" % given,
          file=sys.stderr)
    return None


def binary() -> str:
    """The idemgate binary: IDEMGATE_TEST_BINARY's, else built from this
    repository once per run."""
    global _binary
    with _lock:
        if _binary is None:
            _binary = _given_binary()
        if _binary is None:
            go = shutil.which("go")
            if go is None:
                msg = "go is not installed: the Python client's tests need it to build idemgate"
                if os.environ.get("CI") == "true":
                    raise RuntimeError(msg + " (CI=true: failing, not skipping)")
                if not _warned:
                    _warned.append(msg)
                    print("\n*** SKIP: " + msg, file=sys.stderr)
                raise unittest.SkipTest(msg)
            out = os.path.join(_tmp, "idemgate")
            r = subprocess.run([go, "build", "-o", out, "./cmd/idemgate"], cwd=REPO, capture_output=True, text=True)
            if r.returncode != 0:
                raise RuntimeError("go build ./cmd/idemgate failed:\n" + r.stderr)
            _binary = out
        return _binary


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class Process:
    """A server process whose log is a file; its address is read from its
    "listening" line (it listens on port 0: no port is ever guessed)."""

    def __init__(self, args: List[str], cwd: str, name: str) -> None:
        self.log_path = os.path.join(cwd, name + ".log")
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen([binary()] + args, cwd=cwd, stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        _procs.append(self)
        try:
            self.addr = self._await_listening()
        except BaseException:
            self.kill()
            raise
        self.url = "http://" + self.addr

    def _await_listening(self, timeout: float = 20.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("%s exited %d:\n%s" % (self.proc.args, self.proc.returncode, self.log()))
            for line in self.log().splitlines():
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                if entry.get("msg") == "listening" and entry.get("addr"):
                    return str(entry["addr"])
            time.sleep(0.02)
        raise RuntimeError("%s did not listen within %gs:\n%s" % (self.proc.args, timeout, self.log()))

    def log(self) -> str:
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        if self in _procs:
            _procs.remove(self)


def http(method: str, url: str, body: Any = None, token: Optional[str] = None,
         headers: Optional[Dict[str, str]] = None) -> Tuple[int, Dict[str, str], Any]:
    """One plain request (urllib, not the client under test): status,
    headers (lower-case names) and the body as JSON (or text)."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    if token:
        req.add_header("Authorization", "Bearer " + token)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            status, hdrs, raw = resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as e:
        status, hdrs, raw = e.code, dict(e.headers), e.read()
    try:
        parsed: Any = json.loads(raw) if raw else None
    except ValueError:
        parsed = raw.decode("utf-8", "replace")
    return status, {k.lower(): v for k, v in hdrs.items()}, parsed


ACTIONS = """actions:
  - {name: support.reply.send, lease: 1s}
  - {name: invoice.pdf.render, lease: 1s}
  - {name: storm.send, lease: 2s}
  - {name: agents.only, lease: 1s, roles: [agent]}
  - {name: small.result, lease: 1s, max_result: 1KiB}
  - {name: alert.page, lease: 1s, business_key: /source_event_id}
  - {name: deploy.run, lease: 1s, concurrency_key: /environment}
  - name: refund.issue
    lease: 1s
    approval: {ttl: 15m, approvers: [approver], summary: 'Refund {{.body.amount}} to {{.body.customer}}'}
"""


class Gateway:
    """``idemgate serve`` on a SQLite store in its own directory, with the
    principals of TOKENS, the test actions, and (with upstream) the
    reference opsapi behind POST /v1/tickets, where a ticket whose title
    starts with "urgent" needs an approver's approval first."""

    def __init__(self, upstream: bool = False, faults: bool = False, actions: str = ACTIONS,
                 sweep_interval: str = "100ms") -> None:
        self.dir = tempdir()
        self.ops: Optional[Process] = None
        try:
            routes = ""
            upstreams = ""
            if upstream:
                args = ["opsapi", "--listen", "127.0.0.1:0", "--db", os.path.join(self.dir, "ops.db"), "--naive"]
                self.ops = Process(args + (["--faults"] if faults else []), self.dir, "opsapi")
                upstreams = "upstreams:\n  ops: {url: %s, timeout: 10s}\n" % self.ops.url
                routes = ("routes:\n  - match: POST /v1/tickets\n    upstream: ops\n    lease: 1s\n"
                          "    approval: {when: 'body.title.startsWith(\"urgent\")', ttl: 15m, approvers: [approver],"
                          " summary: 'Ticket {{.body.title}}'}\n")
            principals = "principals:\n" + "".join(
                "  - {name: %s, tenant: %s, roles: [%s], token_sha256: %s}\n" % (n, t, ", ".join(r), token_hash(tok))
                for tok, (n, t, r) in TOKENS.items())
            config = ("listen: 127.0.0.1:0\nstore: sqlite:%s\nsweep_interval: %s\nshutdown_timeout: 5s\n"
                      % (os.path.join(self.dir, "gw.db"), sweep_interval)) + upstreams + principals + routes + actions
            self.config = os.path.join(self.dir, "gw.yaml")
            with open(self.config, "w") as f:
                f.write(config)
            self.gw = Process(["serve", "--config", self.config], self.dir, "gateway")
            self.url = self.gw.url
            self._await_ready()
        except BaseException:
            self.close()
            raise

    def _await_ready(self) -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if http("GET", self.url + "/readyz")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.02)
        raise RuntimeError("gateway not ready:\n" + self.gw.log())

    def effects(self) -> int:
        """Tickets the upstream created: its own count, not HTTP answers."""
        assert self.ops is not None
        return int(http("GET", self.ops.url + "/v1/effects")[2]["tickets_created"])

    def faults(self, **faults: Any) -> None:
        assert self.ops is not None
        status, _, body = http("POST", self.ops.url + "/_faults", faults)
        if status != 200:
            raise RuntimeError("arm faults: %d %s" % (status, body))

    def operation(self, op_id: str, token: str = "agent-token") -> Dict[str, Any]:
        status, _, body = http("GET", "%s/_idem/v1/operations/%s" % (self.url, op_id), token=token)
        if status != 200:
            raise AssertionError("operation %s: %d %s" % (op_id, status, body))
        return body

    def by_key(self, key: str, token: str = "agent-token") -> Dict[str, Any]:
        import urllib.parse
        status, _, body = http("GET", "%s/_idem/v1/operations?key=%s" % (self.url, urllib.parse.quote(key, safe="")),
                               token=token)
        if status != 200:
            raise AssertionError("operation under %s: %d %s" % (key, status, body))
        return body

    def approve(self, approval_id: str, token: str = "alice-token") -> Tuple[int, Any]:
        """An approver's decision through the control API, echoing the
        fingerprint the approval shows: status and body."""
        base = "%s/_idem/v1/approvals/%s" % (self.url, approval_id)
        status, _, approval = http("GET", base, token=token)
        if status != 200:
            return status, approval
        status, _, body = http("POST", base + "/approve", {"fingerprint": approval["fingerprint"], "note": "checked"},
                               token=token)
        return status, body

    def call(self, *args: str, journal: str, token: str = "agent-token",
             url: Optional[str] = None) -> Tuple[int, Dict[str, Any], str]:
        """``idemgate call`` (the Go agent) on this gateway: exit status,
        the printed outcome, stderr."""
        env = dict(os.environ, IDEMGATE_TOKEN=token)
        r = subprocess.run([binary(), "call", "--journal", journal, "--gateway", url or self.url] + list(args),
                           capture_output=True, text=True, env=env, timeout=60)
        try:
            out = json.loads(r.stdout) if r.stdout.strip() else {}
        except ValueError:
            out = {"raw": r.stdout}
        return r.returncode, out, r.stderr

    def close(self) -> None:
        for p in (getattr(self, "gw", None), self.ops):
            if p is not None:
                p.kill()


class GatewayCase(unittest.TestCase):
    """Tests sharing one gateway, started for the class (``gateway``: the
    Gateway's options) and stopped after it, whatever happened."""

    gateway: Dict[str, Any] = {}
    gw: Gateway

    @classmethod
    def setUpClass(cls) -> None:
        cls.gw = Gateway(**cls.gateway)
        cls.addClassCleanup(cls.gw.close)


def dead_url() -> str:
    """The URL of a port nothing listens on (bound, then closed)."""
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return "http://127.0.0.1:%d" % port
