-- Effects (docs/design.md, "Multi-effect operations and the outbox"): an
-- operation's several effects, each under its derived key
-- <operation key>/<name>, with its own state, written by Enqueue in the
-- caller's business transaction and delivered by a relay, leased and
-- fenced like an operation's owner. seq is the delivery order: the
-- effects of one operation go out in increasing seq, each once every
-- earlier one succeeded. next_at is when a prepared or unknown effect is
-- due; NULL parks it for an operator.
CREATE TABLE idem_effects (
    seq          bigserial PRIMARY KEY,
    id           text NOT NULL UNIQUE,
    tenant       text NOT NULL,
    op_key       text NOT NULL,
    name         text NOT NULL,
    key          text NOT NULL,
    target       text NOT NULL,
    method       text NOT NULL,
    path         text NOT NULL,
    headers      bytea,
    body         bytea NOT NULL,
    fingerprint  text NOT NULL,
    state        text NOT NULL
        CHECK (state IN ('prepared', 'executing', 'succeeded', 'failed', 'unknown')),
    attempts     integer NOT NULL DEFAULT 0,
    owner_token  text,
    fence        bigint NOT NULL DEFAULT 0,
    lease_until  timestamptz,
    next_at      timestamptz,
    status       integer,
    result_ref   text,
    last_error   text,
    resolved_by  text,
    note         text,
    retention_us bigint NOT NULL,
    created_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL,
    expires_at   timestamptz,
    UNIQUE (tenant, key),
    CHECK ((state = 'executing') = (lease_until IS NOT NULL))
);

-- What a relay's claim reads: the due effects, and the deliveries whose
-- lease may have lapsed.
CREATE INDEX idem_effects_due ON idem_effects (next_at, seq) WHERE state IN ('prepared', 'unknown') AND next_at IS NOT NULL;
CREATE INDEX idem_effects_executing ON idem_effects (lease_until) WHERE state = 'executing';
-- An operation's effects, in order: its view, and the claim's check that
-- every earlier effect succeeded.
CREATE INDEX idem_effects_operation ON idem_effects (tenant, op_key, seq);
-- The retention purge reads only final effects.
CREATE INDEX idem_effects_purge ON idem_effects (expires_at) WHERE state IN ('succeeded', 'failed');
