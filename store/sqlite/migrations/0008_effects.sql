-- Effects (docs/design.md, "Multi-effect operations and the outbox"): an
-- operation's several effects, each under its derived key
-- <operation key>/<name>, with its own state, written by Enqueue in the
-- caller's business transaction and delivered by a relay, leased and
-- fenced like an operation's owner. seq, the rowid, is the delivery
-- order: the effects of one operation go out in increasing seq, each once
-- every earlier one succeeded. A new rowid is above every existing one,
-- so purging old rows never reorders the live ones. next_at is when a
-- prepared or unknown effect is due; NULL parks it for an operator.
CREATE TABLE idem_effects (
    seq          INTEGER PRIMARY KEY,
    id           TEXT NOT NULL UNIQUE,
    tenant       TEXT NOT NULL,
    op_key       TEXT NOT NULL,
    name         TEXT NOT NULL,
    key          TEXT NOT NULL,
    target       TEXT NOT NULL,
    method       TEXT NOT NULL,
    path         TEXT NOT NULL,
    headers      BLOB,
    body         BLOB NOT NULL,
    fingerprint  TEXT NOT NULL,
    state        TEXT NOT NULL
        CHECK (state IN ('prepared', 'executing', 'succeeded', 'failed', 'unknown')),
    attempts     INTEGER NOT NULL DEFAULT 0,
    owner_token  TEXT,
    fence        INTEGER NOT NULL DEFAULT 0,
    lease_until  INTEGER,
    next_at      INTEGER,
    status       INTEGER,
    result_ref   TEXT,
    last_error   TEXT,
    resolved_by  TEXT,
    note         TEXT,
    retention_us INTEGER NOT NULL,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL,
    expires_at   INTEGER,
    UNIQUE (tenant, key),
    CHECK ((state = 'executing') = (lease_until IS NOT NULL))
) STRICT;

-- What a relay's claim reads: the due effects, and the deliveries whose
-- lease may have lapsed.
CREATE INDEX idem_effects_due ON idem_effects (next_at, seq) WHERE state IN ('prepared', 'unknown') AND next_at IS NOT NULL;
CREATE INDEX idem_effects_executing ON idem_effects (lease_until) WHERE state = 'executing';
-- An operation's effects, in order: its view, and the claim's check that
-- every earlier effect succeeded.
CREATE INDEX idem_effects_operation ON idem_effects (tenant, op_key, seq);
-- The retention purge reads only final effects.
CREATE INDEX idem_effects_purge ON idem_effects (expires_at) WHERE state IN ('succeeded', 'failed');
