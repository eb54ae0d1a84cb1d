-- The rules an operation's fingerprint was made under (a route's named
-- headers, ignored members and query parameters, opaque body), as the
-- adapter wrote them: a retry after a reload that changed them is
-- fingerprinted again under these, so that an answered key still replays
-- (docs/design.md, "Fingerprint rules"). NULL: the default rules.
ALTER TABLE idem_operations ADD COLUMN fingerprint_rules TEXT;
