"""Keys derived from the agent's secret: the Go client's (agent.Keys),
byte for byte, and the secret found where ``idemgate call`` finds it."""

import os
import stat
import unittest
from unittest import mock

import idemgate
from idemgate.keys import Keys, load_secret

from . import harness

SECRET = b"a-test-secret-of-more-than-sixteen-bytes"


class KeysTest(unittest.TestCase):
    def test_vectors_are_the_go_clients(self) -> None:
        # The same vectors as agent/keys_test.go's, computed apart.
        k, anon = Keys(SECRET, "agent-7"), Keys(SECRET, "")
        self.assertEqual(k.key("task-42/create-ticket", 1), "ik1.RvMuxD0NSLUlme4y3ZCKT58YNCgWAlImYV6A9_BaIng")
        self.assertEqual(k.key("task-42/create-ticket", 2), "ik1.QyhsDBwPzUJ852NRoYOeqJFtUllm1I4QhhBVjTqBer4")
        self.assertEqual(anon.key("task-42/create-ticket", 1), "ik1.SLmApNrS1clOGzLIEwTdl-xD1iVyLNXEEETKGMaP6TQ")
        self.assertEqual(k.key("tâche-42/créer", 1), "ik1.pDbzsVJ8QC6JhrHV0-Ng_NQY0s7PYnz4_Q8i1mgYY60")
        self.assertNotIn(SECRET.decode(), repr(k) + str(k))

    def test_refuses_a_weak_secret_and_a_bad_name(self) -> None:
        with self.assertRaises(idemgate.Error) as cm:
            Keys(b"short", "")
        self.assertEqual(cm.exception.code, "weak_secret")
        with self.assertRaises(idemgate.Error):
            Keys(SECRET, "bad\nname")

    def test_where_the_secret_comes_from(self) -> None:
        config = harness.tempdir()
        named = os.path.join(harness.tempdir(), "secret")
        with open(named, "w") as f:
            f.write("from-the-named-file-0123456789\n")
        env = {"XDG_CONFIG_HOME": config, "IDEMGATE_AGENT_SECRET": "from-the-environment-0123456789",
               "IDEMGATE_AGENT_SECRET_FILE": ""}
        with mock.patch.dict(os.environ, env):
            self.assertEqual(load_secret(named), b"from-the-named-file-0123456789")
            self.assertEqual(load_secret(None), b"from-the-environment-0123456789")
            os.environ["IDEMGATE_AGENT_SECRET_FILE"] = named
            self.assertEqual(load_secret(None), b"from-the-named-file-0123456789")
            os.environ["IDEMGATE_AGENT_SECRET_FILE"] = os.path.join(config, "none")
            with self.assertRaises(idemgate.Error):  # named, so it must exist: never made
                load_secret(None)
            del os.environ["IDEMGATE_AGENT_SECRET_FILE"], os.environ["IDEMGATE_AGENT_SECRET"]
            made = load_secret(None)  # none configured: made once, then kept
            path = os.path.join(config, "idemgate", "agent-secret")
            self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600)
            self.assertGreaterEqual(len(made), 32)
            self.assertEqual(load_secret(None), made)


if __name__ == "__main__":
    unittest.main()
