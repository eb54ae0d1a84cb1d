"""Client.request: writes through a real gateway to the reference upstream,
keyed by intents in the journal, counted at the upstream (its effects),
never by HTTP answers."""

import os
import sqlite3
import threading
import time
import unittest

import idemgate
from idemgate.journal import APPLICATION_ID, Journal, JournalError

from . import harness

TICKET = {"project": "py", "title": "printer on fire", "priority": 2}


class RequestTest(harness.GatewayCase):
    gateway = dict(upstream=True, faults=True, actions="")

    def setUp(self) -> None:
        self.dir = harness.tempdir()
        self.journal = os.path.join(self.dir, "journal.db")
        self.client = self.new_client()

    def tearDown(self) -> None:
        self.client.close()

    def new_client(self, url: str = "", **kw) -> idemgate.Client:
        c = idemgate.Client(url or self.gw.url, token="agent-token", journal=self.journal, **kw)
        self.addCleanup(c.close)
        return c

    def test_created_then_replayed_one_effect(self) -> None:
        before = self.gw.effects()
        out = self.client.request("POST", "/v1/tickets", json=TICKET, intent="t/create")
        self.assertEqual(out.kind, "created", out.reason)
        self.assertEqual((out.status, out.sent, out.attempts), (201, "yes", 1))
        self.assertTrue(out.operation_id.startswith("op_"))
        self.assertEqual(out.json()["title"], TICKET["title"])
        self.assertIn("Done", out.next_step)
        # A restarted process: a new client on the same journal resumes the same key.
        again = self.new_client().request("POST", "/v1/tickets", json=dict(reversed(list(TICKET.items()))),
                                          intent="t/create")
        self.assertEqual(again.kind, "replayed", again.reason)
        self.assertEqual((again.key, again.operation_id), (out.key, out.operation_id))
        self.assertEqual(again.json(), out.json())
        self.assertEqual(self.gw.effects() - before, 1)

    def test_lost_journal_replays(self) -> None:
        # The key is derived from the agent's secret: a journal deleted between
        # two requests of one intent makes the same key, and the gateway replays.
        before = self.gw.effects()
        out = self.client.request("POST", "/v1/tickets", json=TICKET, intent="t/lost-journal")
        self.assertEqual(out.kind, "created", out.reason)
        self.assertTrue(out.key.startswith("ik1."), out.key)
        self.client.close()
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(self.journal + suffix):
                os.remove(self.journal + suffix)
        again = self.new_client().request("POST", "/v1/tickets", json=TICKET, intent="t/lost-journal")
        self.assertEqual(again.kind, "replayed", again.reason)
        self.assertEqual((again.key, again.operation_id), (out.key, out.operation_id))
        self.assertEqual(self.gw.effects() - before, 1)

    def test_changed_payload_is_refused_before_sending(self) -> None:
        before = self.gw.effects()
        self.client.request("POST", "/v1/tickets", json=TICKET, intent="t/changed")
        with self.assertRaises(idemgate.Error) as cm:
            self.client.request("POST", "/v1/tickets", json=dict(TICKET, title="other"), intent="t/changed")
        self.assertEqual(cm.exception.code, "payload_changed")
        self.assertIsNone(cm.exception.status)
        self.assertEqual(self.gw.effects() - before, 1)
        # Revise: a new version, a new key, a second effect on purpose.
        rev = self.client.request("POST", "/v1/tickets", json=dict(TICKET, title="other"), intent="t/changed",
                                  mode="revise")
        self.assertEqual((rev.kind, rev.version), ("created", 2))
        self.assertEqual(self.gw.effects() - before, 2)

    def test_repeat_is_a_new_identical_action(self) -> None:
        before = self.gw.effects()
        first = self.client.request("POST", "/v1/tickets", json=TICKET, intent="t/repeat")
        second = self.client.request("POST", "/v1/tickets", json=TICKET, intent="t/repeat", mode="repeat")
        self.assertEqual((second.kind, second.intent), ("created", "t/repeat#2"))
        self.assertNotEqual(first.key, second.key)
        self.assertEqual(self.gw.effects() - before, 2)

    def test_unreachable_gateway_is_failed_unsent_then_resumed(self) -> None:
        before = self.gw.effects()
        dead = self.new_client(url=harness.dead_url(), policy=idemgate.Policy(max_attempts=2, base_delay=0.01))
        out = dead.request("POST", "/v1/tickets", json=TICKET, intent="t/unreachable")
        self.assertEqual((out.kind, out.sent, out.unfinished), ("failed", "no", True), out.reason)
        self.assertIn("connection refused", out.reason)
        self.assertIn("gave up after 2 tries", out.reason)
        self.assertIn("Nothing reached the gateway", out.next_step)
        self.assertIn("t/unreachable", [e.intent for e in self.client.pending()])
        resumed = self.client.request("POST", "/v1/tickets", json=TICKET, intent="t/unreachable")
        self.assertEqual(resumed.kind, "created", resumed.reason)
        self.assertEqual(resumed.key, out.key)
        self.assertNotIn("t/unreachable", [e.intent for e in self.client.pending()])
        status = self.client.status("t/unreachable")
        self.assertEqual((status.kind, status.json()["state"]), ("created", "succeeded"))
        self.assertEqual(self.gw.effects() - before, 1)

    def test_lost_answer_is_unknown_and_never_resent(self) -> None:
        before = self.gw.effects()
        self.gw.faults(drop_response_after_commit=1)  # the upstream commits, then cuts the connection
        out = self.client.request("POST", "/v1/tickets", json=TICKET, intent="t/lost")
        self.assertEqual(out.kind, "unknown", out.reason)
        self.assertIn("Do not retry", out.next_step)
        again = self.client.request("POST", "/v1/tickets", json=TICKET, intent="t/lost")
        self.assertEqual(again.kind, "unknown", again.reason)
        self.assertEqual(again.attempts, out.attempts, "a resume of an unknown intent sends nothing")
        self.assertEqual(self.client.status("t/lost").kind, "unknown")
        with self.assertRaises(idemgate.Error) as cm:
            self.client.request("POST", "/v1/tickets", json=TICKET, intent="t/lost", mode="repeat")
        self.assertEqual(cm.exception.code, "not_settled")
        self.assertEqual(self.gw.effects() - before, 1)

    def test_refusals_are_kinds_not_exceptions(self) -> None:
        bad = self.client.request("POST", "/v1/tickets", json={"project": "py"}, intent="t/rejected")
        self.assertEqual((bad.kind, bad.status), ("rejected", 422), bad.reason)
        nobody = idemgate.Client(self.gw.url, token="wrong-token", journal=self.journal)
        self.addCleanup(nobody.close)
        denied = nobody.request("POST", "/v1/tickets", json=TICKET, intent="t/unauthorized")
        self.assertEqual((denied.kind, denied.status), ("unauthorized", 401), denied.reason)

    def test_needs_approval_then_resumed_once_approved(self) -> None:
        before = self.gw.effects()
        urgent = dict(TICKET, title="urgent: database down")
        out = self.client.request("POST", "/v1/tickets", json=urgent, intent="t/approval")
        self.assertEqual((out.kind, out.status, out.sent), ("needs_approval", 202, "yes"), out.reason)
        self.assertIsNotNone(out.approval)
        self.assertEqual((out.approval.status, out.approval.summary), ("pending", "Ticket urgent: database down"))
        self.assertIn("human", out.next_step)
        again = self.client.request("POST", "/v1/tickets", json=urgent, intent="t/approval")
        self.assertEqual(again.kind, "needs_approval", again.reason)  # asked the gateway; nothing sent
        self.assertEqual(self.gw.effects() - before, 0)
        status, body = self.gw.approve(out.approval.id)
        self.assertEqual(status, 200, body)
        done = self.client.request("POST", "/v1/tickets", json=urgent, intent="t/approval")
        self.assertEqual((done.kind, done.status), ("created", 201), done.reason)
        self.assertEqual(self.gw.effects() - before, 1)

    def test_approval_wait_runs_it_when_approved(self) -> None:
        before = self.gw.effects()
        urgent = dict(TICKET, title="urgent: cert expires today")
        first = self.client.request("POST", "/v1/tickets", json=urgent, intent="t/approval-wait")
        self.assertEqual(first.kind, "needs_approval", first.reason)
        decided = []

        def approve() -> None:
            time.sleep(0.5)
            decided.append(self.gw.approve(first.approval.id)[0])
        approver = threading.Thread(target=approve)
        approver.start()
        started = time.monotonic()
        out = self.client.request("POST", "/v1/tickets", json=urgent, intent="t/approval-wait", approval_wait=10)
        approver.join()
        self.assertEqual(decided, [200])
        self.assertEqual(out.kind, "created", out.reason)
        self.assertLess(time.monotonic() - started, 5, "the gateway held the request until the decision")
        self.assertEqual(self.gw.effects() - before, 1)

    def test_threads_sharing_one_intent_make_one_effect(self) -> None:
        before = self.gw.effects()
        kinds = []
        lock = threading.Lock()

        def one() -> None:
            out = self.client.request("POST", "/v1/tickets", json=TICKET, intent="t/threads")
            with lock:
                kinds.append(out.kind)
        threads = [threading.Thread(target=one) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(sorted(kinds), ["created"] + ["replayed"] * 7)
        self.assertEqual(self.gw.effects() - before, 1)

    def test_local_refusals(self) -> None:
        for kwargs, code in [(dict(intent=""), "invalid_action"), (dict(intent="x", mode="again"), "invalid_action"),
                             (dict(intent="never-made", mode="revise"), "no_intent")]:
            with self.subTest(kwargs=kwargs):
                with self.assertRaises(idemgate.Error) as cm:
                    self.client.request("POST", "/v1/tickets", json=TICKET, **kwargs)
                self.assertEqual(cm.exception.code, code)
        with self.assertRaises(idemgate.InvalidJSON):
            self.client.request("POST", "/v1/tickets", json={"n": float("inf")}, intent="t/nan")
        with Journal(self.journal) as j:
            self.assertIsNone(j.latest("t/nan"), "nothing journaled for a body that is not JSON")


class JournalFileTest(unittest.TestCase):
    def test_marks_the_file_and_refuses_others(self) -> None:
        d = harness.tempdir()
        path = os.path.join(d, "j.db")
        Journal(path).close()
        db = sqlite3.connect(path)
        self.assertEqual(db.execute("PRAGMA application_id").fetchone()[0], APPLICATION_ID)
        db.close()
        other = os.path.join(d, "other.db")
        db = sqlite3.connect(other)
        db.execute("CREATE TABLE t (x)")
        db.commit()
        db.close()
        with self.assertRaises(JournalError):
            Journal(other)
        with open(os.path.join(d, "text.db"), "w") as f:
            f.write("not a database, just text that is long enough to not look like an empty file" * 20)
        with self.assertRaises(JournalError):
            Journal(os.path.join(d, "text.db"))


if __name__ == "__main__":
    unittest.main()
