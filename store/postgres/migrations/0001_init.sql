-- The operations registry. (tenant, key) is the identity of an intended
-- action; its unique constraint is what makes reservation atomic.
CREATE TABLE idem_operations (
    id                  text PRIMARY KEY,
    tenant              text NOT NULL,
    key                 text NOT NULL,
    route               text NOT NULL,
    fingerprint         text NOT NULL,
    state               text NOT NULL
        CHECK (state IN ('prepared', 'executing', 'succeeded', 'failed', 'unknown')),
    attempts            integer NOT NULL DEFAULT 0,
    owner_token         text,
    fence               bigint NOT NULL DEFAULT 0,
    lease_until         timestamptz,
    business_key        text,
    concurrency_key     text,
    approval_id         text,
    approval_status     text,
    approval_expires_at timestamptz,
    response_status     integer,
    response_headers    bytea,
    response_body       bytea,
    result_ref          text,
    last_error          text,
    retention_us        bigint NOT NULL,
    created_at          timestamptz NOT NULL,
    updated_at          timestamptz NOT NULL,
    expires_at          timestamptz NOT NULL,
    CONSTRAINT idem_operations_tenant_key UNIQUE (tenant, key),
    CONSTRAINT idem_operations_lease CHECK ((state = 'executing') = (lease_until IS NOT NULL))
);

-- The operations that are not final. One index serves the lease-expiry
-- sweep (state = 'executing' ordered by lease_until) and listing what needs
-- attention (prepared, executing, unknown); final operations, the bulk of
-- the table, stay out of it, so completing one only adds a purge entry.
-- State leads, so the planner never takes it for a (tenant, key) lookup.
CREATE INDEX idem_operations_live ON idem_operations (state, lease_until, tenant, id)
    WHERE state IN ('prepared', 'executing', 'unknown');
-- business_key: one operation per (tenant, route, value), across keys.
CREATE UNIQUE INDEX idem_operations_business ON idem_operations (tenant, route, business_key)
    WHERE business_key IS NOT NULL;
-- concurrency_key: at most one live operation per (tenant, route, value):
-- executing, unknown, or prepared awaiting an approval.
CREATE UNIQUE INDEX idem_operations_concurrency ON idem_operations (tenant, route, concurrency_key)
    WHERE concurrency_key IS NOT NULL
      AND (state IN ('executing', 'unknown') OR (state = 'prepared' AND approval_status = 'pending'));
-- The retention purge reads only purgeable operations.
CREATE INDEX idem_operations_purge_due ON idem_operations (expires_at)
    WHERE state IN ('prepared', 'succeeded', 'failed');

-- One row per transition, written in the statement that makes it. It is
-- only ever read by operation, so (op_id, seq) is its one index.
CREATE TABLE idem_transitions (
    seq        bigserial NOT NULL,
    op_id      text NOT NULL,
    from_state text,
    to_state   text NOT NULL,
    at         timestamptz NOT NULL,
    actor      text NOT NULL,
    reason     text NOT NULL DEFAULT ''
);
CREATE INDEX idem_transitions_op ON idem_transitions (op_id, seq);
