"""One journal, two languages: an intent begun by ``idemgate call`` (the Go
agent) is resumed by Client.request, and the other way round, with the
same key and exactly one effect at the upstream (its own count)."""

import os
import signal
import sqlite3
import subprocess
import sys
import time
import unittest

import idemgate
from idemgate.journal import Journal

from . import harness

TICKET = {"project": "xlang", "title": "disk full on db-3", "priority": 1}
BODY = '{"title": "disk full on db-3", "project": "xlang", "priority": 1}'  # the same command, other bytes


class CrossLanguageTest(harness.GatewayCase):
    gateway = dict(upstream=True, faults=True, actions="")

    def setUp(self) -> None:
        self.journal = os.path.join(harness.tempdir(), "journal.db")
        self.before = self.gw.effects()

    def client(self, url: str = "", **kw) -> idemgate.Client:
        c = idemgate.Client(url or self.gw.url, token="agent-token", journal=self.journal, **kw)
        self.addCleanup(c.close)
        return c

    def go(self, intent: str, body: str = BODY, url: str = ""):
        return self.gw.call("--intent", intent, "POST", "/v1/tickets", "-d", body, journal=self.journal, url=url)

    def effects(self) -> int:
        return self.gw.effects() - self.before

    def test_go_created_python_replays(self) -> None:
        code, out, err = self.go("x/go-first")
        self.assertEqual((code, out.get("kind")), (0, "created"), err)
        py = self.client().request("POST", "/v1/tickets", json=TICKET, intent="x/go-first")
        self.assertEqual(py.kind, "replayed", py.reason)
        self.assertEqual((py.key, py.operation_id), (out["key"], out["operation_id"]))
        self.assertEqual(py.json(), out["body"])
        self.assertEqual(self.effects(), 1)

    def test_go_unsent_python_performs_go_replays(self) -> None:
        code, out, err = self.go("x/go-unsent", url=harness.dead_url())
        self.assertEqual((code, out.get("kind"), out.get("sent")), (10, "failed", "no"), err)
        py = self.client().request("POST", "/v1/tickets", json=TICKET, intent="x/go-unsent")
        self.assertEqual((py.kind, py.key), ("created", out["key"]), py.reason)
        code, again, err = self.go("x/go-unsent")
        self.assertEqual((code, again.get("kind"), again.get("operation_id")), (0, "replayed", py.operation_id), err)
        self.assertEqual(self.effects(), 1)

    def test_python_unsent_go_performs_python_replays(self) -> None:
        dead = self.client(url=harness.dead_url(), policy=idemgate.Policy(max_attempts=1))
        py = dead.request("POST", "/v1/tickets", json=TICKET, intent="x/py-unsent")
        self.assertEqual((py.kind, py.sent), ("failed", "no"), py.reason)
        code, out, err = self.go("x/py-unsent")
        self.assertEqual((code, out.get("kind"), out.get("key")), (0, "created", py.key), err)
        again = self.client().request("POST", "/v1/tickets", json=TICKET, intent="x/py-unsent")
        self.assertEqual((again.kind, again.operation_id), ("replayed", out["operation_id"]), again.reason)
        self.assertEqual(self.effects(), 1)

    def test_go_killed_in_flight_python_resumes_one_effect(self) -> None:
        self.gw.faults(delay_ms=1500)  # the upstream holds every write 1.5s before performing it
        self.addCleanup(self.gw.faults, delay_ms=0)
        env = dict(os.environ, IDEMGATE_TOKEN="agent-token")
        go = subprocess.Popen([harness.binary(), "call", "--journal", self.journal, "--gateway", self.gw.url,
                               "--intent", "x/go-killed", "POST", "/v1/tickets", "-d", BODY],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.wait_for_upstream()  # the request went through the gateway; the upstream holds it
        go.send_signal(signal.SIGKILL)
        go.wait()
        self.gw.faults(delay_ms=0)
        with Journal(self.journal) as j:
            entry = j.latest("x/go-killed")
        self.assertEqual((entry.attempts, entry.last_kind, entry.sent), (1, "", "maybe"))
        py = self.client().request("POST", "/v1/tickets", json=TICKET, intent="x/go-killed")
        self.assertEqual(py.kind, "replayed", py.reason)  # asked the gateway, waited, replayed: never a second run
        self.assertEqual(py.key, entry.key)
        self.assertEqual(self.effects(), 1)

    def test_python_killed_in_flight_go_resumes_one_effect(self) -> None:
        self.gw.faults(delay_ms=1500)
        self.addCleanup(self.gw.faults, delay_ms=0)
        script = ("import sys, idemgate\n"
                  "c = idemgate.Client(sys.argv[1], token='agent-token', journal=sys.argv[2])\n"
                  "c.request('POST', '/v1/tickets', json=%r, intent='x/py-killed')\n" % (TICKET,))
        py = subprocess.Popen([sys.executable, "-c", script, self.gw.url, self.journal], cwd=harness.CLIENT_DIR,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.wait_for_upstream()
        py.send_signal(signal.SIGKILL)
        py.wait()
        self.gw.faults(delay_ms=0)
        code, out, err = self.go("x/py-killed")
        self.assertEqual((code, out.get("kind")), (0, "replayed"), err)
        self.assertEqual(self.effects(), 1)

    def test_unknown_is_unknown_in_both_languages_and_never_resent(self) -> None:
        self.gw.faults(drop_response_after_commit=1)
        py = self.client().request("POST", "/v1/tickets", json=TICKET, intent="x/unknown")
        self.assertEqual(py.kind, "unknown", py.reason)
        code, out, err = self.go("x/unknown")
        self.assertEqual((code, out.get("kind"), out.get("attempts")), (8, "unknown", py.attempts), err)
        self.gw.faults(drop_response_after_commit=1)
        code, out, err = self.go("x/unknown-go")
        self.assertEqual((code, out.get("kind")), (8, "unknown"), err)
        again = self.client().request("POST", "/v1/tickets", json=TICKET, intent="x/unknown-go")
        self.assertEqual((again.kind, again.attempts), ("unknown", out["attempts"]), again.reason)
        self.assertEqual(self.effects(), 2)

    def test_a_changed_payload_is_refused_across_languages(self) -> None:
        code, _, err = self.go("x/changed")
        self.assertEqual(code, 0, err)
        with self.assertRaises(idemgate.Error) as cm:
            self.client().request("POST", "/v1/tickets", json=dict(TICKET, priority=2), intent="x/changed")
        self.assertEqual(cm.exception.code, "payload_changed")
        self.client().request("POST", "/v1/tickets", json=TICKET, intent="x/py-changed")
        code, _, err = self.go("x/py-changed", body='{"project": "xlang", "title": "other"}')
        self.assertEqual(code, 2, err)
        self.assertIn("differs", err)
        self.assertEqual(self.effects(), 2)

    def test_a_lost_journal_resumes_in_the_other_language(self) -> None:
        # Both derive the key from the same secret (the harness sets it), agent
        # and intent: a journal lost after one language performed the write,
        # the other makes the same key with a new journal, and is replayed.
        code, out, err = self.go("x/lost-go")
        self.assertEqual((code, out.get("kind")), (0, "created"), err)
        self.lose_journal()
        c = self.client()
        py = c.request("POST", "/v1/tickets", json=TICKET, intent="x/lost-go")
        self.assertEqual((py.kind, py.key, py.operation_id), ("replayed", out["key"], out["operation_id"]), py.reason)
        py = c.request("POST", "/v1/tickets", json=TICKET, intent="x/lost-py")
        self.assertEqual(py.kind, "created", py.reason)
        c.close()
        self.lose_journal()
        code, out, err = self.go("x/lost-py")
        self.assertEqual((code, out.get("kind"), out.get("key")), (0, "replayed", py.key), err)
        self.assertEqual(self.effects(), 2)

    def lose_journal(self) -> None:
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(self.journal + suffix):
                os.remove(self.journal + suffix)

    def test_both_languages_make_the_same_journal(self) -> None:
        go_path, py_path = self.journal, os.path.join(harness.tempdir(), "py.db")
        code, _, err = self.go("x/schema", url=harness.dead_url())  # creates the file, sends nothing
        self.assertEqual(code, 10, err)
        Journal(py_path).close()

        def schema(path: str):
            db = sqlite3.connect(path)
            try:
                rows = db.execute("SELECT type, name, sql FROM sqlite_master ORDER BY name").fetchall()
                app = db.execute("PRAGMA application_id").fetchone()[0]
            finally:
                db.close()
            return app, [(t, n, " ".join((s or "").split())) for t, n, s in rows]
        self.assertEqual(schema(py_path), schema(go_path))

    def wait_for_upstream(self) -> None:
        """Until the upstream is performing a write (its in_flight count):
        the request left the journal, reached the gateway and was forwarded."""
        assert self.gw.ops is not None
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if harness.http("GET", self.gw.ops.url + "/_faults")[2].get("in_flight", 0) > 0:
                return
            time.sleep(0.02)
        self.fail("no write reached the upstream")

if __name__ == "__main__":
    unittest.main()
