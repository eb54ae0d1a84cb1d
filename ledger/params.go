package ledger

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// ReserveParams describes a new operation.
type ReserveParams struct {
	Tenant, Key, Route, Fingerprint string
	// Namespace is the key's (NamespaceClients, WebhookNamespace, …) and
	// Kind the surface the operation comes through; both required.
	Namespace                   string
	Kind                        Kind
	Lease                       time.Duration // > 0: reserve with lease (executing); 0: prepared
	Retention                   time.Duration // how long the key is remembered once final
	BusinessKey, ConcurrencyKey string
	Actor                       string // recorded in the history
	// Principal, Target, RunID and TraceID are the audit log's context of
	// the request (docs/design.md, "Audit log"); all optional.
	Principal, Target, RunID, TraceID string
	// Probe is the route's probe request, rendered from this request
	// (docs/design.md, "Reconciliation"); "" when the route declares none.
	Probe string
	// FingerprintRules are the rules Fingerprint was made under, as the
	// adapter writes them, kept on the operation ("" for the default
	// rules); at most MaxFingerprintRules bytes of UTF-8 text.
	FingerprintRules string
	// Approval, when set, reserves the operation prepared (Lease must be
	// 0) with a pending approval, in the same atomic step.
	Approval *ApprovalRequest
	// ID and Token, when set (NewID, NewToken), are the new operation's id
	// and its owner's token; unset, the store makes them. A caller that
	// sets them may repeat a reservation whose reply it lost (a store error
	// after the commit may have happened): the store recognises the
	// operation this very reservation created, and answers it as created,
	// with its lease, not as someone else's.
	ID, Token string
}

// MaxFingerprintRules bounds an operation's FingerprintRules.
const MaxFingerprintRules = 4 << 10

// MaxKeyLen bounds an idempotency key, as the HTTP contract does.
const MaxKeyLen = 255

// MinDuration is the finest lease or retention a store keeps: both stores
// count time in microseconds, and a shorter one would round to nothing.
const MinDuration = time.Microsecond

// Validate refuses parameters no store should write, so that both stores
// answer bad input alike, with ErrInvalid, before any driver sees it.
func (p ReserveParams) Validate() error {
	if err := texts(map[string]string{"tenant": p.Tenant, "route": p.Route, "fingerprint": p.Fingerprint,
		"actor": p.Actor}, p.BusinessKey, p.ConcurrencyKey, p.Principal, p.Target, p.RunID, p.TraceID, p.Probe,
		p.FingerprintRules); err != nil {
		return err
	}
	switch {
	case (p.ID != "" || p.Token != "") && (!cleanText(p.ID) || !cleanText(p.Token) || p.ID == "" || p.Token == ""):
		return invalid("id and token go together, as non-empty UTF-8 text")
	case p.Key == "" || len(p.Key) > MaxKeyLen || !cleanText(p.Key):
		return invalid("key must be 1 to %d bytes of UTF-8 text", MaxKeyLen)
	case !validNamespace(p.Namespace):
		return invalid("namespace must be 1 to %d bytes of UTF-8 text (%s for the clients' own)", MaxNamespaceLen,
			NamespaceClients)
	case !p.Kind.Valid():
		return invalid("kind %q: want one of %v", p.Kind, Kinds)
	case len(p.FingerprintRules) > MaxFingerprintRules:
		return invalid("fingerprint rules of %d bytes: at most %d", len(p.FingerprintRules), MaxFingerprintRules)
	case p.Lease != 0 && p.Lease < MinDuration:
		return invalid("lease %v: want 0 (reserve only) or at least %v", p.Lease, MinDuration)
	case p.Retention < MinDuration:
		return invalid("retention %v: want at least %v", p.Retention, MinDuration)
	case p.Approval != nil && p.Lease != 0:
		return invalid("an operation that waits for an approval is reserved without a lease")
	case p.Approval != nil:
		return p.Approval.Validate()
	}
	return nil
}

// texts checks that each named field is non-empty UTF-8 text without NUL,
// and that the optional ones, when set, are too.
func texts(required map[string]string, optional ...string) error {
	for name, v := range required {
		if v == "" || !cleanText(v) {
			return invalid("%s must be non-empty UTF-8 text", name)
		}
	}
	for _, v := range optional {
		if !cleanText(v) {
			return invalid("a business or concurrency key, and a request's context, must be UTF-8 text")
		}
	}
	return nil
}

// cleanText reports whether s is valid UTF-8 without NUL, which PostgreSQL
// cannot store in text and SQLite would truncate at.
func cleanText(s string) bool { return utf8.ValidString(s) && !strings.ContainsRune(s, 0) }

// Holdable reports whether every value is text a store can hold: a read
// by an id, a key or a cursor that is not (op_x%00 in a URL) names
// nothing, and is answered so by the store before its database refuses
// it in words a caller must not be shown (issue 24, 7.6).
func Holdable(values ...string) bool {
	for _, v := range values {
		if !cleanText(v) {
			return false
		}
	}
	return true
}

// Lookup is nil when every value is Holdable, and else ErrNotFound for
// the read what: a store's single reads and pages start with it.
func Lookup(what string, values ...string) error {
	if Holdable(values...) {
		return nil
	}
	return fmt.Errorf("%s: %w", what, ErrNotFound)
}

// State returns the state a new operation starts in.
func (p ReserveParams) State() State {
	if p.Lease > 0 {
		return Executing
	}
	return Prepared
}

// NewOperation is the operation a reservation of p creates, given what the
// store chose (the id) and read from its clock. Stores build it instead of
// reading back a row they have just written.
func (p ReserveParams) NewOperation(id string, created, leaseUntil, expires time.Time) *Operation {
	op := &Operation{ID: id, Tenant: p.Tenant, Namespace: p.Namespace, Key: p.Key, Kind: p.Kind, Route: p.Route,
		Fingerprint: p.Fingerprint, State: p.State(), BusinessKey: p.BusinessKey, ConcurrencyKey: p.ConcurrencyKey,
		Principal: p.Principal, Target: p.Target, RunID: p.RunID, TraceID: p.TraceID, Probe: p.Probe,
		FingerprintRules: p.FingerprintRules, CreatedAt: created, UpdatedAt: created, ExpiresAt: expires}
	if op.State == Executing {
		op.Attempts, op.Fence, op.LeaseUntil = 1, 1, leaseUntil
	}
	if p.Approval != nil {
		op.Approval = &ApprovalRef{ID: p.Approval.ID, Status: ApprovalPending, ExpiresAt: created.Add(p.Approval.TTL)}
	}
	return op
}

// AcquireParams takes a lease on an existing operation.
type AcquireParams struct {
	ID     string
	Lease  time.Duration
	Actor  string
	Reason string
	// Resend allows taking an unknown operation, for upstreams that honour
	// the key: the request is sent again with the same key and the upstream
	// deduplicates it. Never set it for any other upstream.
	Resend bool
	// RunID and TraceID are the sending request's, for the audit log; an
	// empty one keeps the operation's.
	RunID, TraceID string
}

// Validate refuses an acquire without a lease or an actor.
func (p AcquireParams) Validate() error {
	switch {
	case p.ID == "":
		return invalid("operation id is empty")
	case p.Lease < MinDuration:
		return invalid("lease %v: want at least %v", p.Lease, MinDuration)
	case p.Actor == "" || !cleanText(p.Actor) || !cleanText(p.Reason):
		return invalid("actor must be non-empty UTF-8 text")
	case !cleanText(p.RunID) || !cleanText(p.TraceID):
		return invalid("run and trace ids must be UTF-8 text")
	}
	return nil
}

// Outcome is how an owner ends its operation.
type Outcome struct {
	State     State // Succeeded or Failed
	Response  *Response
	ResultRef string
	ErrorCode string
	Reason    string
	// AfterLapse lets the owner settle its operation even when its lease
	// lapsed and the expiry made it unknown (StepCompleteLapsed), provided
	// nobody has moved it since: same token, same fence, still the
	// expiry's unknown. For an owner that could not reach the store while
	// its lease ran out, and holds the upstream's answer: the proof a
	// reconciler would look for (docs/design.md, "Durability").
	AfterLapse bool
}

// Validate refuses an outcome that is not final, or that has no response:
// the stored response is what every retry will be given.
func (o Outcome) Validate() error {
	switch {
	case !o.State.Final():
		return invalid("complete needs succeeded or failed, not %s", o.State)
	case o.Response == nil:
		return invalid("complete needs the response to store")
	case !cleanText(o.Reason) || !cleanText(o.ResultRef) || !cleanText(o.ErrorCode):
		return invalid("reason, result reference and error code must be UTF-8 text")
	}
	return nil
}

// Note explains a release or a move to unknown, in the history.
type Note struct {
	Reason    string
	ErrorCode string
}

// Validate refuses text a store cannot keep.
func (n Note) Validate() error {
	if !cleanText(n.Reason) || !cleanText(n.ErrorCode) {
		return invalid("reason and error code must be UTF-8 text")
	}
	return nil
}

// ResolveParams is an audited decision about an unknown operation.
type ResolveParams struct {
	ID    string
	To    State // Succeeded, Failed or Prepared (proven not applied)
	Actor string
	Note  string
	// Response is optional, and only with a final state: an operator who
	// resolves an unknown operation may not know the upstream's answer. A
	// replay of a final operation without one answers with its status.
	Response  *Response
	ResultRef string
}

// Validate requires a named actor and a note: resolutions are audited. A
// response goes only with a final state: an operation back in prepared has
// no answer yet.
func (p ResolveParams) Validate() error {
	switch {
	case p.Response != nil && !p.To.Final():
		return invalid("a response can only be stored with succeeded or failed")
	case p.ID == "":
		return invalid("operation id is empty")
	case p.Actor == "" || !cleanText(p.Actor):
		return invalid("resolve needs a named actor")
	case p.Note == "" || !cleanText(p.Note) || !cleanText(p.ResultRef):
		return invalid("resolve needs a note, in UTF-8 text")
	}
	return nil
}
