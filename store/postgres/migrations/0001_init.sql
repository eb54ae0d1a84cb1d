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

-- The lease-expiry sweep reads only executing operations.
CREATE INDEX idem_operations_lease_due ON idem_operations (lease_until)
    WHERE state = 'executing';
-- The retention purge reads only purgeable ones.
CREATE INDEX idem_operations_purge_due ON idem_operations (expires_at)
    WHERE state IN ('prepared', 'succeeded', 'failed');
-- Listing by tenant and state, paged by id.
CREATE INDEX idem_operations_list ON idem_operations (tenant, state, id);

-- One row per transition, written in the statement that makes it.
CREATE TABLE idem_transitions (
    seq        bigserial PRIMARY KEY,
    op_id      text NOT NULL,
    from_state text,
    to_state   text NOT NULL,
    at         timestamptz NOT NULL,
    actor      text NOT NULL,
    reason     text NOT NULL DEFAULT ''
);
CREATE INDEX idem_transitions_op ON idem_transitions (op_id, seq);
