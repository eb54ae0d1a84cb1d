-- Reconciliation probes (docs/design.md, "Reconciliation"): one reconciler at a
-- time owns an unknown operation's probe, leased and fenced like an
-- owner's lease, and an inconclusive probe is due again at probe_next.
-- probe is the probe request, rendered from the request at reservation
-- (its template's inputs are not kept).
ALTER TABLE idem_operations ADD COLUMN probe text, ADD COLUMN probe_token text, ADD COLUMN probe_fence bigint NOT NULL DEFAULT 0,
    ADD COLUMN probe_until timestamptz, ADD COLUMN probe_next timestamptz, ADD COLUMN probes integer NOT NULL DEFAULT 0;
