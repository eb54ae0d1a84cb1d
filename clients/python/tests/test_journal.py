"""The journal file on its own: no gateway."""

import os
import sqlite3
import stat
import tempfile
import unittest

import idemgate
from idemgate.journal import Journal


class JournalFileTest(unittest.TestCase):
    def setUp(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="idemgate-journal-")
        self.path = os.path.join(self.dir, "journal.db")

    def test_a_new_journal_is_private(self) -> None:
        # It holds the keys that prove an agent's intents: not for other
        # users to read (the Go client's journal too: agent TestJournalIsPrivate).
        old = os.umask(0o022)
        try:
            Journal(self.path).close()
        finally:
            os.umask(old)
        self.assertEqual(stat.S_IMODE(os.stat(self.path).st_mode), 0o600)

    def test_a_journal_corrupted_after_opening_is_an_idemgate_error(self) -> None:
        j = Journal(self.path)
        self.addCleanup(j.close)
        self.assertIsNone(j.latest("nothing yet"))
        # Its pages damaged on disk (past the header), then a write by
        # another process, which makes the journal read them again.
        other = sqlite3.connect(self.path, isolation_level=None)
        self.addCleanup(other.close)
        other.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        size = os.path.getsize(self.path)
        with open(self.path, "r+b") as f:
            f.seek(4096)
            f.write(b"x" * (size - 4096))
        other.execute("PRAGMA user_version = 7")
        with self.assertRaises(idemgate.Error) as cm:
            j.latest("anything")
        self.assertEqual(cm.exception.code, "journal_error")
        self.assertIn(self.path, str(cm.exception))


if __name__ == "__main__":
    unittest.main()
