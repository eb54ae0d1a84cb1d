// Package audit is idemgate's tamper-evident log (docs/design.md, "Audit log"):
// the events of every operation's story, as the leaves of an RFC 6962
// Merkle tree (the Go checksum database's golang.org/x/mod/sumdb/tlog),
// with signed checkpoints in the C2SP tlog-checkpoint format, so that
// anyone holding the verifier key can check an export offline. It imports
// no store: stores keep its events and hashes, and the commands read them.
package audit

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/idemgate/idemgate/fingerprint"
)

// Kind names what an event records (docs/design.md's list).
type Kind string

// The event kinds. Received, conflict and replayed are not transitions;
// the others record one, or an approval's decision.
const (
	Received          Kind = "received"
	Conflict          Kind = "conflict"
	Duplicate         Kind = "duplicate"
	Locked            Kind = "locked"
	ApprovalRequested Kind = "approval_requested"
	Approved          Kind = "approved"
	Denied            Kind = "denied"
	ApprovalExpired   Kind = "approval_expired"
	Forwarded         Kind = "forwarded"
	Answered          Kind = "answered"
	Succeeded         Kind = "succeeded"
	Failed            Kind = "failed"
	Released          Kind = "released"
	Unknown           Kind = "unknown"
	Resolved          Kind = "resolved"
	Replayed          Kind = "replayed"
	AnswerUnrecorded  Kind = "answer_unrecorded"
)

// Kinds lists every kind.
var Kinds = []Kind{Received, Conflict, Duplicate, Locked, ApprovalRequested, Approved, Denied, ApprovalExpired,
	Forwarded, Answered, Succeeded, Failed, Released, Unknown, Resolved, Replayed, AnswerUnrecorded}

// Recorded lists the kinds recorded apart from any transition: what a
// request was answered without one. The gateway writes them in batches.
var Recorded = []Kind{Received, Conflict, Duplicate, Locked, Replayed, AnswerUnrecorded, Answered}

// ClientsNamespace is the namespace of the tenant's clients' keys
// (ledger.NamespaceClients): an event in it has no namespace member.
const ClientsNamespace = "clients"

// Event is one entry of a tenant's log. Empty strings and a zero status
// are absent, and render as null. It never holds a body, a token or a
// secret: a response is named by its SHA-256 alone.
type Event struct {
	// ID is the event's place in its store, in the order of recording;
	// not part of the leaf. Seq is -1 until the event is sealed.
	ID             int64
	Seq            int64     // position in the tenant's log, from 0
	At             time.Time // microseconds, UTC
	Tenant         string
	OperationID    string
	Kind           Kind
	Principal      string
	RunID          string // the agent's Idempotency-Run
	TraceID        string // from traceparent
	Key            string
	Fingerprint    string
	Route          string
	Target         string
	From, To       string // the transition's states, for a transition
	Actor          string
	Reason         string
	UpstreamStatus int
	ResultRef      string
	ResponseSHA256 string
	// Namespace is the key's namespace (docs/design.md, "Words"); ""
	// and ClientsNamespace, the tenant's clients' own, are left out of
	// the leaf, so that every event of before namespaces, and of a
	// client's key, has the leaf it always had.
	Namespace string
}

// Leaf is the event's leaf bytes: the RFC 8785 canonical JSON of its
// object, seq included, as an export line holds it. It is written field by
// field, in the canonical order of the member names (all ASCII, so their
// byte order): a map sorted at every call costs a verifier of millions of
// events most of its time.
func (e Event) Leaf() ([]byte, error) {
	b := make([]byte, 0, 512)
	b = member(b, '{', "actor", e.Actor)
	b = append(b, `,"at":"`...)
	b = e.At.UTC().AppendFormat(b, "2006-01-02T15:04:05.000000Z")
	b = append(b, '"')
	for _, f := range [...]struct{ name, v string }{{"fingerprint", e.Fingerprint}, {"from", e.From},
		{"key", e.Key}, {"kind", string(e.Kind)}} {
		b = member(b, ',', f.name, f.v)
	}
	if e.Namespace != "" && e.Namespace != ClientsNamespace {
		b = member(b, ',', "namespace", e.Namespace)
	}
	for _, f := range [...]struct{ name, v string }{{"operation_id", e.OperationID}, {"principal", e.Principal},
		{"reason", e.Reason}, {"response_sha256", e.ResponseSHA256}, {"result_ref", e.ResultRef},
		{"route", e.Route}, {"run_id", e.RunID}} {
		b = member(b, ',', f.name, f.v)
	}
	b = strconv.AppendInt(append(b, `,"seq":`...), e.Seq, 10)
	for _, f := range [...]struct{ name, v string }{{"target", e.Target}, {"tenant", e.Tenant}, {"to", e.To},
		{"trace_id", e.TraceID}} {
		b = member(b, ',', f.name, f.v)
	}
	b = append(b, `,"upstream_status":`...)
	if e.UpstreamStatus == 0 {
		b = append(b, "null"...)
	} else {
		b = strconv.AppendInt(b, int64(e.UpstreamStatus), 10)
	}
	b = append(b, '}')
	if !utf8.Valid(b) || e.Seq < 0 || e.Seq > 1<<53 {
		return nil, fmt.Errorf("event %d: not valid UTF-8, or its position out of range", e.Seq)
	}
	return b, nil
}

// member appends sep, "name": and the value ("" is null).
func member(b []byte, sep byte, name, v string) []byte {
	b = append(append(append(b, sep, '"'), name...), '"', ':')
	if v == "" {
		return append(b, "null"...)
	}
	return fingerprint.AppendString(b, v)
}

// LeafHash is the RFC 6962 hash of the event's leaf.
func (e Event) LeafHash() (tlog.Hash, error) {
	b, err := e.Leaf()
	if err != nil {
		return tlog.Hash{}, err
	}
	return tlog.RecordHash(b), nil
}

// wire is an export line as JSON reads it.
type wire struct {
	Seq            *int64  `json:"seq"`
	At             string  `json:"at"`
	Tenant         string  `json:"tenant"`
	OperationID    *string `json:"operation_id"`
	Kind           string  `json:"kind"`
	Principal      *string `json:"principal"`
	RunID          *string `json:"run_id"`
	TraceID        *string `json:"trace_id"`
	Namespace      *string `json:"namespace"`
	Key            *string `json:"key"`
	Fingerprint    *string `json:"fingerprint"`
	Route          *string `json:"route"`
	Target         *string `json:"target"`
	From           *string `json:"from"`
	To             *string `json:"to"`
	Actor          *string `json:"actor"`
	Reason         *string `json:"reason"`
	UpstreamStatus *int    `json:"upstream_status"`
	ResultRef      *string `json:"result_ref"`
	ResponseSHA256 *string `json:"response_sha256"`
}

// ParseEvent reads an export line back into an event.
func ParseEvent(line []byte) (Event, error) {
	var w wire
	if err := json.Unmarshal(line, &w); err != nil {
		return Event{}, fmt.Errorf("not an event: %w", err)
	}
	if w.Seq == nil || w.Kind == "" || w.Tenant == "" {
		return Event{}, fmt.Errorf("not an event: seq, kind and tenant are required")
	}
	at, err := time.Parse(time.RFC3339Nano, w.At)
	if err != nil {
		return Event{}, fmt.Errorf("event %d: at: %w", *w.Seq, err)
	}
	d := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	e := Event{Seq: *w.Seq, At: at, Tenant: w.Tenant, OperationID: d(w.OperationID), Kind: Kind(w.Kind),
		Principal: d(w.Principal), RunID: d(w.RunID), TraceID: d(w.TraceID), Namespace: d(w.Namespace), Key: d(w.Key),
		Fingerprint: d(w.Fingerprint), Route: d(w.Route), Target: d(w.Target), From: d(w.From), To: d(w.To),
		Actor: d(w.Actor), Reason: d(w.Reason), ResultRef: d(w.ResultRef), ResponseSHA256: d(w.ResponseSHA256)}
	if w.UpstreamStatus != nil {
		e.UpstreamStatus = *w.UpstreamStatus
	}
	return e, nil
}
