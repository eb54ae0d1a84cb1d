package contract

// Fate is what an upstream's answer means for its operation
// (docs/design.md, "Operation states": upstream outcomes map to states).
type Fate int

// The fates of docs/design.md's outcome mapping.
const (
	FateSucceeded Fate = iota // stored, replayed
	FateFailed                // a definite refusal: stored, replayed
	FateReleased              // definitely not applied (e.g. 429): safe to retry
	FateUnknown               // may have been applied: never silently re-run
)

// DefaultClassify is docs/design.md's mapping: 2xx (and 3xx) succeeded;
// 4xx failed, except 408, 409, 425 and 429, which say "not now" and
// release the operation; 5xx unknown. The middleware, the gateway and the
// outbox's relay all start from it.
func DefaultClassify(status int) Fate {
	switch {
	case status < 400:
		return FateSucceeded
	case status == 408, status == 409, status == 425, status == 429:
		return FateReleased
	case status < 500:
		return FateFailed
	}
	return FateUnknown
}
