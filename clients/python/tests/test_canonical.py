"""Canonical JSON and fingerprints agree with the Go implementation
(``idemgate canonicalize`` and ``idemgate fingerprint``), byte for byte:
a journal is shared across languages only if both fingerprint alike."""

import json
import subprocess
import unittest

from idemgate import InvalidJSON, canonical, fingerprint
from idemgate.canonical import number

from . import harness

# Values whose canonical forms are easy to get wrong: member order by UTF-16
# code units (a character above U+FFFF before U+E000..U+FFFF), ECMAScript
# number forms (1e21, 1e-7, 1e16 as digits), escapes, nesting. (No two
# names of one object differ only in case: idemgate refuses those, since a
# case-insensitive decoder upstream takes them for one.)
CASES = [
    {"b": 1, "a": 2, "aa": [], "Z": {}},
    {"\U0001F600": 1, "\ue000": 2, "\u00e9": 3, "z": None},
    [1e21, 1e20, 1.5e-7, 1e-6, 0.1, -0.5, 1e16, 123.0, 5e-324, 1.7976931348623157e308, 333333333.3333333],
    [2 ** 53, -(2 ** 53), 2 ** 53 + 2, 10 ** 21, 0, -0.0],
    {"s": "line\nbreak\t\"quoted\" \\ \u2028 \x01 \x7f caf\u00e9"},
    {"deep": [[[{"x": [True, False, None]}]]]},
    "just a string",
    {"amount_minor": 125000, "customer": "cus_42", "ticket": "584", "version": 3},
]


class CanonicalTest(unittest.TestCase):
    def test_same_bytes_as_go(self) -> None:
        for value in CASES:
            with self.subTest(value=value):
                mine = canonical(value)
                go = subprocess.run([harness.binary(), "canonicalize"], input=json.dumps(value).encode(),
                                    capture_output=True, check=True).stdout
                self.assertEqual(mine, go)

    def test_journal_fingerprint_as_go(self) -> None:
        # agent.actionFingerprint: method, the path as route, tenant "agent".
        for method, path, body in [("POST", "/v1/tickets", {"project": "p", "title": "t"}),
                                   ("put", "/v1/tickets/7/status?notify=a&notify=b", {"status": "closed"}),
                                   ("POST", "/v1/tickets", None)]:
            with self.subTest(path=path):
                data = b"" if body is None else json.dumps(body).encode()
                go = subprocess.run([harness.binary(), "fingerprint", "--method", method, "--route", path,
                                     "--tenant", "agent"], input=data, capture_output=True, check=True).stdout
                self.assertEqual(fingerprint(method, path, "agent", body), go.decode().strip())

    def test_refuses_what_a_double_would_change(self) -> None:
        for bad, where in [({"n": 2 ** 53 + 1}, "/n"), ({"n": [1 << 60]}, "/n/0"), ([float("nan")], "/0"),
                           ({"x": {1, 2}}, "/x"), ({1: "a"}, "/"), ({"s": "\ud800"}, "/s"), ({"b": b"bytes"}, "/b")]:
            with self.subTest(bad=repr(bad)):
                with self.assertRaises(InvalidJSON) as cm:
                    canonical(bad)
                self.assertEqual(cm.exception.code, "invalid_command")
                self.assertIn("(path %s)" % where, cm.exception.detail)
        self.assertIsInstance(InvalidJSON("invalid_command"), ValueError)

    def test_refuses_names_that_differ_only_in_case_as_go(self) -> None:
        # A case-insensitive decoder upstream takes them for one name; the
        # Go canonicaliser refuses them, and the two journals must agree.
        for bad in [{"environment": "staging", "Environment": "production"}, {"a": {"stra\u00dfe": 1, "STRASSE": 2}},
                    [{"k": 1, "\u212a": 2}]]:
            with self.subTest(bad=bad):
                with self.assertRaises(InvalidJSON) as cm:
                    canonical(bad)
                self.assertIn("case-insensitive", cm.exception.detail)
                go = subprocess.run([harness.binary(), "canonicalize"], input=json.dumps(bad).encode(),
                                    capture_output=True)
                self.assertNotEqual(go.returncode, 0, "the Go canonicaliser took %r" % (bad,))

    def test_depth_is_bounded_as_in_go(self) -> None:
        ok = []
        for _ in range(63):
            ok = [ok]
        canonical(ok)
        with self.assertRaises(InvalidJSON):
            canonical([ok])

    def test_numbers_print_as_ecmascript(self) -> None:
        for f, want in [(1e21, "1e+21"), (1e-7, "1e-7"), (1.5e-7, "1.5e-7"), (1e16, "10000000000000000"),
                        (0.000001, "0.000001"), (-0.0, "0"), (100.0, "100"), (1.25e25, "1.25e+25")]:
            self.assertEqual(number(f), want)


if __name__ == "__main__":
    unittest.main()
