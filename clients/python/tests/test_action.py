"""client.action and @client.idempotent against a real gateway's actions.

Effects are counted where they happen: a counter under a lock for threads
of this process, lines appended to a file for worker processes.
"""

import os
import signal
import subprocess
import sys
import threading
import time
import unittest
from typing import Any, Dict, List

import idemgate

from . import harness


class ActionTest(harness.GatewayCase):
    def setUp(self) -> None:
        self.client = self.new_client()
        self.key_prefix = "%s:%s:" % (self.id().rsplit(".", 1)[-1], time.monotonic_ns())

    def new_client(self, token: str = "agent-token", url: str = "", **kw: Any) -> idemgate.Client:
        c = idemgate.Client(url or self.gw.url, token=token, **kw)
        self.addCleanup(c.close)
        return c

    def key(self, name: str) -> str:
        return self.key_prefix + name

    def history_reasons(self, op_id: str) -> List[str]:
        return [h.get("reason", "") for h in self.gw.operation(op_id)["history"]]

    # -- the common path

    def test_owner_then_replay_with_the_recorded_result(self) -> None:
        key = self.key("ticket_584:v3")
        with self.client.action("support.reply.send", key=key, command={"ticket": "584", "version": 3}) as op:
            self.assertFalse(op.replayed)
            self.assertEqual(op.state, "executing")
            self.assertIsInstance(op.fence, int)
            op.succeed({"message_id": "m-1"}, result_ref="m-1")
        self.assertEqual(op.state, "succeeded")
        view = self.gw.operation(op.operation_id)
        self.assertEqual((view["route"], view["result_ref"], view["attempts"]),
                         ("action:support.reply.send", "m-1", 1))
        with self.client.action("support.reply.send", key=key, command={"version": 3, "ticket": "584"}) as again:
            self.assertTrue(again.replayed)
            self.assertEqual(again.result, {"message_id": "m-1"})
            self.assertEqual((again.operation_id, again.state), (op.operation_id, "succeeded"))
            with self.assertRaises(idemgate.Error) as cm:
                again.succeed({"twice": True})
            self.assertEqual(cm.exception.code, "not_owner")

    def test_a_normal_exit_records_succeeded_with_null(self) -> None:
        key = self.key("null")
        with self.client.action("support.reply.send", key=key, command={"n": 1}) as op:
            pass
        self.assertEqual(op.state, "succeeded")
        with self.client.action("support.reply.send", key=key, command={"n": 1}) as again:
            self.assertTrue(again.replayed)
            self.assertIsNone(again.result)

    def test_fail_is_recorded_and_replayed(self) -> None:
        key = self.key("fail")
        with self.client.action("support.reply.send", key=key, command={}) as op:
            op.fail({"error": "mailbox does not exist"})
        with self.client.action("support.reply.send", key=key, command={}) as again:
            self.assertEqual((again.replayed, again.state), (True, "failed"))
            self.assertEqual(again.result, {"error": "mailbox does not exist"})

    # -- the drills

    def test_storm_of_20_threads_one_effect(self) -> None:
        key = self.key("storm")
        effects = []
        lock = threading.Lock()
        seen: List[Any] = []
        errors: List[BaseException] = []
        start = threading.Barrier(20)

        def worker() -> None:
            try:
                start.wait()
                with self.client.action("storm.send", key=key, command={"to": "ops@example.com"}) as op:
                    if op.replayed:
                        got = ("replayed", op.result)
                    else:
                        with lock:
                            effects.append(1)
                        time.sleep(0.3)  # the effect takes a while: the others meet it in flight
                        op.succeed({"sent": len(effects)})
                        got = ("owner", op.result)
                with lock:
                    seen.append(got)
            except BaseException as e:  # reported below, with the others'
                with lock:
                    errors.append(e)
        threads = [threading.Thread(target=worker) for _ in range(20)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        self.assertEqual(len(effects), 1)
        self.assertEqual(sorted(kind for kind, _ in seen), ["owner"] + ["replayed"] * 19)
        self.assertEqual({repr(result) for _, result in seen}, {repr({"sent": 1})})

    def test_heartbeat_outlives_three_lease_periods(self) -> None:
        with self.client.action("support.reply.send", key=self.key("long"), command={}) as op:
            time.sleep(3.5)  # lease 1s, sweep every 100ms: only heartbeats keep it
            self.assertFalse(op.lost)
            op.succeed({"took": 3.5})
        view = self.gw.operation(op.operation_id)
        self.assertEqual((view["state"], view["attempts"]), ("succeeded", 1))
        # No heartbeat thread outlives the block; the client's scheduler ends with the client.
        self.assertIsNotNone(op._beat)
        self.assertFalse(op._beat.is_alive())  # type: ignore[union-attr]
        scheduler = self.client._heartbeats._thread
        self.client.close()
        self.assertFalse(scheduler.is_alive())  # type: ignore[union-attr]

    def test_kill_9_of_the_owner_then_outcome_unknown_never_a_second_run(self) -> None:
        d = harness.tempdir()
        effects = os.path.join(d, "effects.txt")
        key = self.key("killed")
        worker = subprocess.Popen([sys.executable, "-c", WORKER, self.gw.url, key, effects],
                                  cwd=harness.CLIENT_DIR, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            line = worker.stdout.readline()  # type: ignore[union-attr]
            why = line or worker.stderr.read()  # type: ignore[union-attr]
            self.assertEqual(line.strip(), b"started", why)
            time.sleep(0.5)  # heartbeats are running
            worker.send_signal(signal.SIGKILL)
        finally:
            worker.kill()
            worker.wait()
            worker.stdout.close()  # type: ignore[union-attr]
            worker.stderr.close()  # type: ignore[union-attr]
        ran = []
        with self.assertRaises(idemgate.OutcomeUnknown) as cm:
            with self.client.action("support.reply.send", key=key, command={"to": "x"}) as op:
                ran.append(op)  # pragma: no cover - must not run
        self.assertEqual(ran, [])
        self.assertEqual((cm.exception.code, cm.exception.status), ("outcome_unknown", 409))
        self.assertTrue(cm.exception.operation_id)
        with open(effects) as f:
            self.assertEqual(f.read().splitlines(), ["effect"])

    def test_changed_command_under_the_same_key_is_refused(self) -> None:
        key = self.key("changed")
        with self.client.action("support.reply.send", key=key, command={"amount": 10}) as op:
            op.succeed()
        ran = []
        with self.assertRaises(idemgate.FingerprintMismatch) as cm:
            with self.client.action("support.reply.send", key=key, command={"amount": 11}):
                ran.append(1)  # pragma: no cover
        self.assertEqual(ran, [])
        self.assertEqual((cm.exception.code, cm.exception.status), ("fingerprint_mismatch", 422))

    def test_approval_then_the_retry_owns_the_effect(self) -> None:
        key = self.key("refund")
        command = {"amount": 1500, "customer": "cus_42"}
        ran = []
        with self.assertRaises(idemgate.ApprovalRequired) as cm:
            with self.client.action("refund.issue", key=key, command=command):
                ran.append(1)  # pragma: no cover
        err = cm.exception
        self.assertEqual((err.code, err.status, ran), ("approval_required", 202, []))
        self.assertEqual(err.summary, "Refund 1500 to cus_42")
        self.assertTrue(err.approval_id and err.approval_url)
        self.assertIsInstance(err, idemgate.Error)
        # The 202 carries the fingerprint an approver echoes: no GET needed.
        self.assertRegex(err.fingerprint, r"^sha256:[0-9a-f]{64}$")
        # Still pending: the same call asks again, nothing runs.
        with self.assertRaises(idemgate.ApprovalRequired):
            with self.client.action("refund.issue", key=key, command=command):
                ran.append(1)  # pragma: no cover
        # Another principal, an approver, decides through the API on the
        # fingerprint it was shown; the requester may not, nor may anyone
        # for another request's fingerprint.
        with self.assertRaises(idemgate.Error) as refused:
            self.client.approve(err.approval_id, err.fingerprint, note="mine")
        self.assertEqual((refused.exception.code, refused.exception.status), ("forbidden", 403))
        approver = self.new_client(token="alice-token")
        with self.assertRaises(idemgate.Error) as mismatch:
            approver.approve(err.approval_id, "sha256:" + "0" * 64, note="checked")
        self.assertEqual(mismatch.exception.code, "approval_mismatch")
        decided = approver.approve(err.approval_id, err.fingerprint, note="checked the customer's refund")
        self.assertEqual((decided["status"], decided["decided_by"]), ("approved", "alice"))
        with self.client.action("refund.issue", key=key, command=command) as op:
            self.assertFalse(op.replayed)
            ran.append(1)
            op.succeed({"refund": "re_1"})
        with self.client.action("refund.issue", key=key, command=command) as again:
            self.assertEqual((again.replayed, again.result), (True, {"refund": "re_1"}))
        self.assertEqual(ran, [1])

    def test_decorator_runs_once_per_key(self) -> None:
        calls: List[Dict[str, Any]] = []
        prefix = self.key_prefix

        @self.client.idempotent("invoice.pdf.render", key=lambda order_id, version, fmt="pdf":
                                "%spdf:%s:v%d" % (prefix, order_id, version))
        def render(order_id: str, version: int, fmt: str = "pdf") -> Dict[str, Any]:
            calls.append({"order_id": order_id, "version": version, "fmt": fmt})
            return {"path": "/invoices/%s-v%d.%s" % (order_id, version, fmt), "pages": (1, 2)}

        first = render("o-1", 2)
        self.assertEqual(first, {"path": "/invoices/o-1-v2.pdf", "pages": [1, 2]})
        self.assertEqual(render("o-1", version=2), first)  # the same key: replayed, not run
        self.assertEqual(len(calls), 1)
        self.assertEqual(render.__name__, "render")
        render("o-1", 3)
        self.assertEqual(len(calls), 2)
        # The command is the arguments by name, defaults applied: another
        # value under the same key is a changed command.
        with self.assertRaises(idemgate.FingerprintMismatch):
            render("o-1", 2, fmt="png")
        self.assertEqual(len(calls), 2)

    def test_not_performed_releases_and_the_next_call_runs_it(self) -> None:
        key = self.key("released")
        with self.assertRaises(idemgate.NotPerformed):
            with self.client.action("support.reply.send", key=key, command={}) as op:
                first_fence = op.fence
                raise idemgate.NotPerformed("smtp server refused the connection")
        self.assertEqual(op.state, "prepared")
        self.assertIn("not performed: smtp server refused the connection", self.history_reasons(op.operation_id))
        with self.assertRaises(idemgate.NotPerformed):
            with self.client.action("support.reply.send", key=key, command={}) as second:
                raise idemgate.NotPerformed("x" * 5000)  # over the gateway's bound on a reason: cut, still released
        self.assertEqual((second.state, second.exit_error), ("prepared", None))
        with self.client.action("support.reply.send", key=key, command={}) as again:
            self.assertFalse(again.replayed)
            self.assertGreater(again.fence, second.fence)
            self.assertGreater(second.fence, first_fence)
            again.succeed({"sent": True})
        self.assertEqual(again.operation_id, op.operation_id)

    def test_a_waiting_duplicate_takes_over_a_release(self) -> None:
        key = self.key("handover")
        got: List[Any] = []

        def duplicate() -> None:
            with self.client.action("storm.send", key=key, command={}) as op:
                got.append(op.replayed)
                op.succeed({"by": "duplicate"})
        with self.assertRaises(idemgate.NotPerformed):
            with self.client.action("storm.send", key=key, command={}):
                t = threading.Thread(target=duplicate)
                t.start()
                time.sleep(0.5)  # the duplicate meets it in progress and waits
                raise idemgate.NotPerformed("quota exhausted")
        t.join()
        self.assertEqual(got, [False], "the waiting duplicate owns the released effect")
        with self.client.action("storm.send", key=key, command={}) as again:
            self.assertEqual((again.replayed, again.result), (True, {"by": "duplicate"}))

    def test_an_exception_records_unknown_with_its_type_not_its_message(self) -> None:
        key = self.key("boom")
        with self.assertRaises(ValueError):
            with self.client.action("support.reply.send", key=key, command={}) as op:
                raise ValueError("password=hunter2 for alice@example.com")
        self.assertEqual(op.state, "unknown")
        reasons = " ".join(self.history_reasons(op.operation_id))
        self.assertIn("ValueError", reasons)
        self.assertNotIn("hunter2", reasons)
        self.assertNotIn("alice@example.com", reasons)
        with self.assertRaises(idemgate.OutcomeUnknown):
            with self.client.action("support.reply.send", key=key, command={}):
                pass  # pragma: no cover

    def test_a_lost_lease_makes_the_exit_raise(self) -> None:
        with self.assertRaises(idemgate.LeaseLost) as cm:
            with self.client.action("support.reply.send", key=self.key("lost"), command={}) as op:
                # Hold the heartbeat back (as a stalled process would) past
                # the lease and the sweep: the next heartbeat finds it lost.
                with op._owner:
                    time.sleep(1.6)
                deadline = time.monotonic() + 3
                while not op.lost and time.monotonic() < deadline:
                    time.sleep(0.05)
                self.assertTrue(op.lost)
        self.assertEqual(cm.exception.code, "lease_lost")
        self.assertEqual(cm.exception.operation_id, op.operation_id)
        self.assertEqual(self.gw.operation(op.operation_id)["state"], "unknown")

    def test_a_lost_step_reply_is_retried(self) -> None:
        proxy = LosingProxy(self.gw.url, lose="/complete")
        self.addCleanup(proxy.close)
        client = self.new_client(url=proxy.url)
        key = self.key("lost-reply")
        with client.action("support.reply.send", key=key, command={}) as op:
            op.succeed({"ok": 1})
        self.assertEqual(proxy.lost, 1)
        self.assertEqual(op.state, "succeeded")
        view = self.gw.operation(op.operation_id)
        self.assertEqual([h["to"] for h in view["history"]], ["executing", "succeeded"])

    def test_a_business_key_duplicate_replays_the_first(self) -> None:
        event = {"source_event_id": self.key("evt-9"), "severity": "high"}
        with self.client.action("alert.page", key=self.key("a"), command=event) as first:
            first.succeed({"paged": "oncall"})
        with self.client.action("alert.page", key=self.key("b"), command=event) as dup:
            self.assertTrue(dup.replayed)
            self.assertEqual((dup.duplicate_of, dup.result), (first.operation_id, {"paged": "oncall"}))

    def test_a_held_concurrency_group_is_waited_out(self) -> None:
        prod = {"environment": self.key("production")}
        order = []
        with self.client.action("deploy.run", key=self.key("v1"), command=prod) as first:
            def second() -> None:
                with self.client.action("deploy.run", key=self.key("v2"), command=prod) as op:
                    order.append(("second", op.replayed))
            t = threading.Thread(target=second)
            t.start()
            time.sleep(0.5)  # the second meets the group held (409 concurrency_locked, Retry-After 1)
            order.append(("first", first.replayed))
        t.join()
        self.assertEqual(order, [("first", False), ("second", False)])

    # -- bad inputs

    def test_bad_inputs(self) -> None:
        with self.assertRaises(idemgate.Error) as cm:
            with self.client.action("no.such.action", key=self.key("x"), command={}):
                pass  # pragma: no cover
        self.assertEqual((cm.exception.code, cm.exception.status), ("not_found", 404))
        for name, key, command, code in [("Bad Name", "k", {}, "invalid_action"),
                                         ("support.reply.send", "", {}, "invalid_key"),
                                         ("support.reply.send", "k\n", {}, "invalid_key"),
                                         ("support.reply.send", " k", {}, "invalid_key"),
                                         ("support.reply.send", "k", {"when": {1, 2}}, "invalid_command"),
                                         ("support.reply.send", "k", {"n": 2 ** 53 + 1}, "invalid_command")]:
            with self.subTest(name=name, key=key, command=repr(command)):
                with self.assertRaises(idemgate.Error) as cm:
                    self.client.action(name, key=key, command=command)
                self.assertEqual((cm.exception.code, cm.exception.status), (code, None))
        unreached = self.new_client(url=harness.dead_url(), policy=idemgate.Policy(max_attempts=2, base_delay=0.01))
        with self.assertRaises(idemgate.Unavailable) as cm:
            with unreached.action("support.reply.send", key=self.key("x"), command={}):
                pass  # pragma: no cover
        self.assertEqual((cm.exception.code, cm.exception.status), ("gateway_unreachable", None))
        self.assertIn("connection refused", cm.exception.detail)
        unentered = self.client.action("support.reply.send", key=self.key("y"), command={})
        with self.assertRaises(idemgate.Error) as cm:
            unentered.succeed()
        self.assertEqual(cm.exception.code, "not_owner")
        nobody = self.new_client(token="wrong-token")
        with self.assertRaises(idemgate.Error) as cm:
            with nobody.action("support.reply.send", key=self.key("x"), command={}):
                pass  # pragma: no cover
        self.assertEqual((cm.exception.code, cm.exception.status), ("unauthorized", 401))
        alice = self.new_client(token="alice-token")
        with self.assertRaises(idemgate.Error) as cm:
            with alice.action("agents.only", key=self.key("x"), command={}):
                pass  # pragma: no cover
        self.assertEqual((cm.exception.code, cm.exception.status), ("forbidden", 403))

    def test_a_result_that_is_not_json_is_refused_before_sending(self) -> None:
        key = self.key("result")
        with self.client.action("support.reply.send", key=key, command={}) as op:
            with self.assertRaises(idemgate.InvalidJSON) as cm:
                op.succeed({"at": object()})
            self.assertEqual(cm.exception.code, "invalid_result")
            self.assertEqual(self.gw.operation(op.operation_id)["state"], "executing")
            op.succeed({"at": "2026-01-01"})  # the lease is still held
        self.assertEqual(op.state, "succeeded")

    def test_a_result_over_max_result_keeps_the_lease(self) -> None:
        with self.client.action("small.result", key=self.key("big"), command={}) as op:
            with self.assertRaises(idemgate.Error) as cm:
                op.succeed({"blob": "x" * 2048})
            self.assertEqual((cm.exception.code, cm.exception.status), ("payload_too_large", 413))
            op.succeed({"ref": "s3://bucket/blob"})
        self.assertEqual(op.state, "succeeded")

    def test_another_tenants_operation_is_not_found(self) -> None:
        with self.client.action("support.reply.send", key=self.key("mine"), command={}) as op:
            steal = {"token": op._token, "fence": op.fence, "state": "succeeded", "result": {"by": "globex"}}
            url = "%s/_idem/v1/operations/%s/complete" % (self.gw.url, op.operation_id)
            status, _, body = harness.http("POST", url, steal, token="other-token")
            self.assertEqual((status, body.get("code")), (404, "not_found"), body)
            op.succeed({"by": "acme"})
        status, _, body = harness.http("GET", "%s/_idem/v1/operations/%s" % (self.gw.url, op.operation_id),
                                       token="other-token")
        self.assertEqual(status, 404, body)
        with self.client.action("support.reply.send", key=self.key("mine"), command={}) as again:
            self.assertEqual(again.result, {"by": "acme"})

# A worker process that owns an action's effect, performs it (a line in a
# file), says so, and works on until it is killed.
WORKER = """
import sys, time
import idemgate
url, key, effects = sys.argv[1:4]
client = idemgate.Client(url, token="agent-token")
with client.action("support.reply.send", key=key, command={"to": "x"}) as op:
    with open(effects, "a") as f:
        f.write("effect\\n")
    print("started", flush=True)
    time.sleep(60)
"""


class LosingProxy:
    """An HTTP proxy to the gateway that loses the first reply to a path
    ending in ``lose``: the request is forwarded and done, then the
    connection is closed without an answer."""

    def __init__(self, upstream: str, lose: str) -> None:
        import http.client
        import http.server
        import urllib.parse
        target = urllib.parse.urlsplit(upstream)
        self.lost = 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.forward()

            def do_GET(self) -> None:
                self.forward()

            def forward(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else None
                conn = http.client.HTTPConnection(target.hostname, target.port, timeout=30)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                conn.request(self.command, self.path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                conn.close()
                if self.path.endswith(lose) and outer.lost == 0:
                    outer.lost += 1
                    self.close_connection = True
                    return  # the step was made; its reply is lost
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in ("content-length", "connection", "transfer-encoding"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


if __name__ == "__main__":
    unittest.main()
