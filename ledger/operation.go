package ledger

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"time"

	"github.com/oklog/ulid/v2"
)

// Operation is one intended business action, identified by (Tenant,
// Namespace, Key): see OpKey.
type Operation struct {
	ID     string // "op_" + a ULID: unique and ordered by creation time
	Tenant string
	// Namespace is where Key means this operation (NamespaceClients, or
	// a webhook route's, a consumer's, an MCP server's); Kind the surface
	// it came through.
	Namespace   string
	Key         string
	Kind        Kind
	Route       string // the route template, e.g. /v1/tickets/{id}; an action's, a consumer's or a tool's name
	Fingerprint string
	State       State
	Attempts    int   // leases taken: each one is a possible delivery
	Fence       int64 // fencing token of the latest lease; grows with every lease
	LeaseUntil  time.Time
	// BusinessKey and ConcurrencyKey are empty when the route names none.
	BusinessKey    string
	ConcurrencyKey string
	Approval       *ApprovalRef // its current approval; nil when none is involved
	Response       *Response    // nil until a response is stored
	ResultRef      string       // the upstream's reference for the effect, when known
	// Principal is who reserved it; Target the method and concrete path it
	// was sent to. RunID and TraceID are the latest sender's agent run
	// (Idempotency-Run) and W3C trace: the audit log's context.
	Principal, Target, RunID, TraceID string
	// ResponseSHA256 names the stored response in the audit log, which
	// never holds a body.
	ResponseSHA256 string
	// Probe is the request that proves whether the effect happened
	// ("GET /v1/payments?reference=ord-7"), rendered at reservation on a
	// route that declares one; "" otherwise.
	Probe string
	// FingerprintRules are the rules Fingerprint was made under, as its
	// adapter wrote them ("" for the default rules): a retry after a
	// change of its route's settings is fingerprinted again under these
	// (docs/design.md, "Fingerprint rules").
	FingerprintRules string
	LastError        string // a short code, never a message holding request data
	CreatedAt        time.Time
	UpdatedAt        time.Time
	ExpiresAt        time.Time // when a final operation may be purged
}

// Response is the stored answer replayed to every retry.
type Response struct {
	Status int
	// Header holds selected headers only, no hop-by-hop. It is a plain
	// map, not net/http's Header (which is assignable to it), so that the
	// domain is the same for every surface, HTTP or not: an MCP result,
	// a consumer's delivery.
	Header map[string][]string
	Body   []byte
}

// SHA256 is the hex SHA-256 of the response's body: how the audit log
// names an answer without holding it.
func (r *Response) SHA256() string {
	if r == nil {
		return ""
	}
	sum := sha256.Sum256(r.Body)
	return hex.EncodeToString(sum[:])
}

// Lease is proof of ownership of an executing operation. Every owner step
// presents it; the store accepts it only while Token and Fence are still the
// operation's current ones.
type Lease struct {
	OpID  string
	Token string // the owner token: a secret between the store and the owner
	Fence int64  // the fencing token: larger than any earlier lease's
	Until time.Time
	Actor string // who holds it, recorded in the history of owner steps
}

// Event is one row of an operation's history, written in the same
// transaction as the state change it records.
type Event struct {
	Seq    int64
	OpID   string
	From   State // None for the reservation
	To     State
	At     time.Time
	Actor  string
	Reason string
}

// ReasonReserveWithLease is the reason the history gives a reservation
// that takes its lease at once: every store records it in these words,
// so that the event a reservation wrote is known without reading it back
// (keyed.Result.History).
const ReasonReserveWithLease = "reserve with lease"

// NewID returns a new operation id: "op_" and a ULID, time-ordered so that
// paging by id is paging by creation time.
func NewID() string { return "op_" + ulid.Make().String() }

// NewToken returns a new owner token, 128 random bits in hex.
func NewToken() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("ledger: no randomness: " + err.Error())
	}
	return hex.EncodeToString(b[:])
}
