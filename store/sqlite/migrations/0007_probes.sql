-- Reconciliation probes (docs/design.md, "Reconciliation"): one reconciler at a
-- time owns an unknown operation's probe, leased and fenced like an
-- owner's lease, and an inconclusive probe is due again at probe_next.
-- probe is the probe request, rendered from the request at reservation
-- (its template's inputs are not kept).
ALTER TABLE idem_operations ADD COLUMN probe TEXT;
ALTER TABLE idem_operations ADD COLUMN probe_token TEXT;
ALTER TABLE idem_operations ADD COLUMN probe_fence INTEGER NOT NULL DEFAULT 0;
ALTER TABLE idem_operations ADD COLUMN probe_until INTEGER;
ALTER TABLE idem_operations ADD COLUMN probe_next INTEGER;
ALTER TABLE idem_operations ADD COLUMN probes INTEGER NOT NULL DEFAULT 0;
