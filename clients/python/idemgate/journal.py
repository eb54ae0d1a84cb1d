"""The agent's journal: the same SQLite file the Go client and ``idemgate
call`` keep (agent/journal.go), so that an intent begun by one is resumed
by the other with the same key.

Everything that makes the file is copied from the Go side on purpose: the
``application_id`` (0x69646d6a, "idmj") that marks a journal, the two
tables, the fixed-width UTC time format (times compare as text), the keys
(128 random bits, URL-safe base64), and the SQL of each write, so that two
processes of either language sharing one file agree on every row.
"""

import base64
import contextlib
import os
import secrets
import sqlite3
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, List, Optional

from .errors import Error
from .times import journal_now, parse as parse_time

APPLICATION_ID = 0x69646D6A

# Makes the key of a new version of an intent (name, version): keys.Keys.key.
KeyFor = Callable[[str, int], str]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS intents (
	name         TEXT NOT NULL,
	version      INTEGER NOT NULL,
	key          TEXT NOT NULL UNIQUE,
	method       TEXT NOT NULL,
	path         TEXT NOT NULL,
	fingerprint  TEXT NOT NULL,
	attempts     INTEGER NOT NULL DEFAULT 0,
	last_kind    TEXT NOT NULL DEFAULT '',
	last_status  INTEGER NOT NULL DEFAULT 0,
	operation_id TEXT NOT NULL DEFAULT '',
	created_at   TEXT NOT NULL,
	updated_at   TEXT NOT NULL,
	PRIMARY KEY (name, version)
);
CREATE TABLE IF NOT EXISTS attempts (
	key        TEXT NOT NULL,
	n          INTEGER NOT NULL,
	started_at TEXT NOT NULL,
	kind       TEXT NOT NULL DEFAULT '',
	status     INTEGER NOT NULL DEFAULT 0,
	sent       TEXT NOT NULL DEFAULT 'maybe',
	PRIMARY KEY (key, n)
);"""

# A journal made before attempts.sent: its attempts stay "maybe" unless the
# gateway answered them (an old journal cannot tell a refused connection
# from a lost answer).
_ADD_SENT = ["ALTER TABLE attempts ADD COLUMN sent TEXT NOT NULL DEFAULT 'maybe'",
             "UPDATE attempts SET sent = 'yes' WHERE status > 0"]

# What the journal knows of an intent's requests (agent.Sent).
SENT_NO, SENT_MAYBE, SENT_YES = "no", "maybe", "yes"

# The kinds after which nothing an intent sent can still take effect.
FINAL_KINDS = ("created", "replayed", "conflict", "rejected", "unauthorized", "failed")

_SENT_OF = """CASE WHEN i.operation_id != '' OR EXISTS (SELECT 1 FROM attempts a WHERE a.key = i.key AND a.sent = 'yes')
	THEN 'yes' WHEN EXISTS (SELECT 1 FROM attempts a WHERE a.key = i.key AND a.sent = 'maybe') THEN 'maybe'
	ELSE 'no' END"""

_COLUMNS = """i.name, i.version, i.key, i.method, i.path, i.fingerprint, i.attempts, i.last_kind, i.last_status,
	i.operation_id, """ + _SENT_OF + """, i.created_at, i.updated_at"""


def new_key() -> str:
    """128 random bits, URL-safe base64 without padding (22 characters)."""
    return base64.urlsafe_b64encode(secrets.token_bytes(16)).rstrip(b"=").decode("ascii")


_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def new_ulid() -> str:
    """A ULID: 48 bits of milliseconds and 80 random bits, Crockford base32."""
    n = (int(time.time() * 1000) << 80) | int.from_bytes(secrets.token_bytes(10), "big")
    return "".join(_CROCKFORD[(n >> (5 * i)) & 31] for i in reversed(range(26)))


@dataclass
class Entry:
    """One version of an intent, as the journal knows it (agent.Entry)."""
    intent: str
    version: int
    key: str
    method: str
    path: str
    fingerprint: str
    attempts: int
    last_kind: str
    last_status: int
    operation_id: str
    sent: str
    created_at: str
    updated_at: str


class JournalError(Error):
    """The journal file cannot be used (not a journal, unreadable, or
    damaged since it was opened): an :class:`idemgate.Error` with code
    ``journal_error``, whatever SQLite said."""

    def __init__(self, detail: str) -> None:
        super().__init__("journal_error", detail)


class Journal:
    """The durable memory of an agent's intents, one SQLite file that
    several processes (Python or Go) may share. Each intent's key is written
    here before the first request that carries it is sent."""

    def __init__(self, path: str) -> None:
        self.path = path
        # The process run (agent.Journal.Run): sent as Idempotency-Run when
        # the client names none, never stored in the file.
        self.run = "run_" + new_ulid()
        self._lock = threading.Lock()
        _create_private(path)
        try:
            self._db = sqlite3.connect(path, timeout=10.0, isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA busy_timeout = 10000")
            self._db.execute("PRAGMA journal_mode = WAL")
            self._db.execute("PRAGMA synchronous = FULL")
            self._init()
        except sqlite3.DatabaseError as e:
            self._close_quietly()
            raise JournalError("journal %s: %s" % (path, e)) from None

    def _close_quietly(self) -> None:
        db = getattr(self, "_db", None)
        if db is not None:
            db.close()

    def _init(self) -> None:
        def init(db: sqlite3.Connection, _now: str) -> None:
            app_id = db.execute("PRAGMA application_id").fetchone()[0]
            tables = db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
            if app_id == 0 and tables == 0:
                db.execute("PRAGMA application_id = %d" % APPLICATION_ID)
            elif app_id != APPLICATION_ID:
                raise JournalError("journal %s: not an idemgate journal (another program's database)" % self.path)
            for stmt in _SCHEMA.split(";"):
                if stmt.strip():
                    db.execute(stmt)
            has_sent = db.execute("SELECT count(*) FROM pragma_table_info('attempts') "
                                  "WHERE name = 'sent'").fetchone()[0]
            if not has_sent:
                for stmt in _ADD_SENT:
                    db.execute(stmt)
        self._tx(init)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> "Journal":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @contextlib.contextmanager
    def _locked(self) -> Iterator[sqlite3.Connection]:
        """The connection, for one use at a time; what SQLite raises (a
        file damaged since it was opened, a disk error) is a JournalError."""
        with self._lock:
            try:
                yield self._db
            except sqlite3.DatabaseError as e:
                raise JournalError("journal %s: %s" % (self.path, e)) from None

    def _tx(self, fn: Callable[[sqlite3.Connection, str], Any]) -> Any:
        """Runs fn in one immediate transaction (the write lock first, as
        the Go side's _txlock=immediate), with the time as text."""
        with self._locked() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                result = fn(db, journal_now())
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
            return result

    def _one(self, sql: str, *args: Any) -> Optional[Entry]:
        with self._locked() as db:
            row = db.execute(sql, args).fetchone()
        return Entry(*row) if row else None

    def latest(self, name: str) -> Optional[Entry]:
        """The newest version of the named intent, or None."""
        return self._one("SELECT " + _COLUMNS + " FROM intents i WHERE i.name = ? ORDER BY i.version DESC LIMIT 1",
                         name)

    def by_operation(self, op_id: str) -> Optional[Entry]:
        """The entry whose request the gateway named op_id, or None."""
        return self._one("SELECT " + _COLUMNS + " FROM intents i WHERE operation_id = ?", op_id)

    def by_key(self, key: str) -> Optional[Entry]:
        return self._one("SELECT " + _COLUMNS + " FROM intents i WHERE i.key = ?", key)

    def pending(self) -> List[Entry]:
        """The latest versions of intents still open, oldest first (see
        agent.Journal.Pending)."""
        sql = ("SELECT " + _COLUMNS + """ FROM intents i
		WHERE version = (SELECT max(version) FROM intents WHERE name = i.name)
		AND (last_kind NOT IN ('created', 'replayed', 'conflict', 'rejected', 'unauthorized', 'failed')
			OR (last_kind = 'failed' AND last_status = 0))
		ORDER BY created_at, name""")
        with self._locked() as db:
            rows = db.execute(sql).fetchall()
        return [Entry(*r) for r in rows]

    def create(self, name: str, version: int, method: str, path: str, fp: str,
               key_for: Optional[KeyFor] = None) -> Entry:
        """Inserts a version of an intent with the key key_for makes for it
        (None: a random one); two processes creating the same version at
        once get the same row, the first's."""
        def create(db: sqlite3.Connection, now: str) -> Entry:
            db.execute("""INSERT INTO intents (name, version, key, method, path, fingerprint, created_at,
		updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (name, version) DO NOTHING""",
                       (name, version, _key(key_for, name, version), method, path, fp, now, now))
            row = db.execute("SELECT " + _COLUMNS + " FROM intents i WHERE name = ? AND version = ?",
                             (name, version)).fetchone()
            return Entry(*row)
        return self._tx(create)

    def create_repeat(self, base: str, method: str, path: str, fp: str,
                      key_for: Optional[KeyFor] = None) -> Entry:
        """Inserts a new intent "<base>#<n>", n the first free number, with
        the key key_for makes for it, in one transaction; refused while an
        intent of the family may still take effect (NotSettled)."""
        base = base.split("#", 1)[0]
        family = _escape_like(base) + "#%"

        def repeat(db: sqlite3.Connection, now: str) -> str:
            row = db.execute("""SELECT name || ' is ' || coalesce(nullif(last_kind, ''), 'unrecorded') FROM intents i
		WHERE (name = ? OR name LIKE ? ESCAPE '\\')
		AND version = (SELECT max(version) FROM intents WHERE name = i.name) AND attempts > 0
		AND last_kind NOT IN ('created', 'replayed', 'conflict', 'rejected', 'unauthorized', 'failed') LIMIT 1""",
                             (base, family)).fetchone()
            if row:
                raise NotSettled("intent %s" % row[0])
            n = db.execute("SELECT count(DISTINCT name) FROM intents WHERE name = ? OR name LIKE ? ESCAPE '\\'",
                           (base, family)).fetchone()[0]
            name = "%s#%d" % (base, n + 1)
            db.execute("""INSERT INTO intents (name, version, key, method, path, fingerprint, created_at,
		updated_at) VALUES (?, 1, ?, ?, ?, ?, ?, ?)""", (name, _key(key_for, name, 1), method, path, fp, now, now))
            return name
        name = self._tx(repeat)
        entry = self.latest(name)
        assert entry is not None
        return entry

    def last_sent_attempt(self, key: str) -> float:
        """When the intent's latest attempt that may have reached the
        gateway started (Unix time), 0.0 if none may have."""
        with self._locked() as db:
            at = db.execute("SELECT max(started_at) FROM attempts WHERE key = ? AND sent != 'no'",
                                  (key,)).fetchone()[0]
        return parse_time(at) if at else 0.0

    def settle(self, key: str, sent: str) -> None:
        """Takes the gateway's word on the attempts under key that may have
        reached it: they did (it holds the operation) or did not."""
        self._tx(lambda db, _now: db.execute("UPDATE attempts SET sent = ? WHERE key = ? AND sent = 'maybe'",
                                             (sent, key)))

    def begin_attempt(self, key: str) -> int:
        """Records an attempt before it is sent; returns its number."""
        def begin(db: sqlite3.Connection, now: str) -> int:
            db.execute("UPDATE intents SET attempts = attempts + 1, updated_at = ? WHERE key = ?", (now, key))
            n = db.execute("SELECT attempts FROM intents WHERE key = ?", (key,)).fetchone()[0]
            db.execute("INSERT INTO attempts (key, n, started_at) VALUES (?, ?, ?)", (key, n, now))
            return int(n)
        return self._tx(begin)

    def record(self, key: str, n: int, kind: str, status: int, operation_id: str, reached: bool,
               sent: str) -> Entry:
        """Stores attempt n's outcome (n 0: the gateway was only asked) and
        returns the intent as the journal now holds it. The SQL is the Go
        side's (agent.Journal.record): a known success is never replaced by
        a lesser answer, an answer that told nothing of the operation does
        not replace a real one, and such an answer after earlier attempts
        that may have arrived unrecorded leaves the intent unknown."""
        keep = ("((last_kind IN ('created', 'replayed') AND ?1 NOT IN ('created', 'replayed')) "
                "OR (NOT ?2 AND last_kind != ''))")

        def record(db: sqlite3.Connection, now: str) -> Entry:
            if n > 0:
                db.execute("UPDATE attempts SET kind = ?, status = ?, sent = ? WHERE key = ? AND n = ?",
                           (kind, status, sent, key, n))
            db.execute("""UPDATE intents SET
			last_kind = CASE WHEN """ + keep + """ THEN last_kind WHEN NOT ?2 AND EXISTS (SELECT 1 FROM attempts
				WHERE key = ?7 AND n != ?3 AND sent = 'maybe') THEN 'unknown' ELSE ?1 END,
			last_status = CASE WHEN """ + keep + """ OR NOT ?2 OR ?3 = 0 THEN last_status ELSE ?4 END,
			operation_id = CASE WHEN ?5 = '' THEN operation_id ELSE ?5 END, updated_at = ?6 WHERE key = ?7""",
                       (kind, 1 if reached else 0, n, status, operation_id or "", now, key))
            return Entry(*db.execute("SELECT " + _COLUMNS + " FROM intents i WHERE i.key = ?", (key,)).fetchone())
        return self._tx(record)


def _key(key_for: Optional[KeyFor], name: str, version: int) -> str:
    return new_key() if key_for is None else key_for(name, version)


class NotSettled(Exception):
    """A repeat while an intent of the family may still take effect."""


def _escape_like(s: str) -> str:
    return s.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _create_private(path: str) -> None:
    """Creates the journal's file, empty, with mode 0600, unless it exists:
    it holds the keys that prove an agent's intents, and SQLite gives its
    -wal and -shm files the main file's mode (as the Go client does). A
    failure is left for SQLite to report as it opens the file."""
    if path == ":memory:" or path.startswith("file:"):
        return
    try:
        os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600))
    except OSError:
        pass


def default_path() -> str:
    """$IDEMGATE_JOURNAL, else ~/.local/state/idemgate/journal.db: the
    file ``idemgate call`` uses by default, so both share it."""
    env = os.environ.get("IDEMGATE_JOURNAL")
    if env:
        return env
    path = os.path.join(os.path.expanduser("~"), ".local", "state", "idemgate", "journal.db")
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    return path
