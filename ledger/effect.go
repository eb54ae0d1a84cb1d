package ledger

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/textproto"
	"slices"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"
)

// An effect is one of an operation's several effects (docs/design.md,
// "Multi-effect operations and the outbox"; the workflow article's
// dossier_42:v5: make the PDF, store it, send the link, write the CRM).
// Hiding them under one state would make a resume either redo the effects
// that succeeded or skip the one that did not; so each has its own derived
// key, <operation key>/<name>, and its own state (the same five), and the
// effects of one operation are delivered in the order they were enqueued:
// a resume goes on at the first that is not final, and never runs a
// succeeded one again.
//
// A Go service writes them with Enqueue in its own business transaction (a
// store's Tx), so that the business write and its effects commit together
// or not at all: the outbox. A relay (package outbox) delivers them to
// their HTTP targets, leased and fenced like an operation's owner, with
// the derived key on every delivery: at least once, never twice at the same
// moment.

// Effect is one effect as the store keeps it.
type Effect struct {
	ID     string
	Tenant string
	// Namespace and OperationKey are the operation's it is an effect of.
	Namespace    string
	OperationKey string
	Name         string
	Key          string // EffectKey(Namespace, OperationKey, Name), sent with every delivery
	// Seq orders effects: those of one operation are delivered in
	// increasing Seq, each once all before it succeeded.
	Seq    int64
	Target string // the relay's name for where it goes (its URL and credentials are the relay's)
	Method string
	Path   string // with its query, relative to the target's URL
	Header map[string][]string
	Body   []byte
	// Fingerprint binds the key to what the effect does: the same key
	// enqueued again with another target, method, path, header or body is
	// refused.
	Fingerprint string
	State       State
	Attempts    int
	Fence       int64
	LeaseUntil  time.Time // while executing
	// NextAt is when a prepared or unknown effect is due; zero when it is
	// final, executing, or parked: out of attempts, waiting for an operator.
	NextAt    time.Time
	Status    int // the status of the target's last answer; 0 before any
	ResultRef string
	LastError string
	// ResolvedBy and Note say which operator settled it, and why.
	ResolvedBy, Note string
	CreatedAt        time.Time
	UpdatedAt        time.Time
}

// Parked reports whether the effect waits for an operator: not final,
// not executing, and due never.
func (e *Effect) Parked() bool {
	return (e.State == Prepared || e.State == Unknown) && e.NextAt.IsZero()
}

// NewEffectID returns a new effect id, "eff_" and a ULID.
func NewEffectID() string { return "eff_" + ulid.Make().String() }

// EffectKey is the derived key of an operation's effect: in the clients'
// namespace (or "") operationKey "/" name, as before namespaces were; in
// any other esc(namespace) "~" esc(operationKey) "~" name, where esc
// escapes '%' (first), '~' and '/' as %25, %7E and %2F. A name holds
// neither '/' nor '~', so each form is one string per operation and name,
// and the second, which has no '/', never equals the first, which always
// has one: the effects of two operations that share a key in two
// namespaces never meet, in the store or at their target.
func EffectKey(namespace, operationKey, name string) string {
	if namespace == "" || namespace == NamespaceClients {
		return operationKey + "/" + name
	}
	return effectEsc.Replace(namespace) + "~" + effectEsc.Replace(operationKey) + "~" + name
}

// effectEsc escapes the separators of EffectKey's namespaced form.
var effectEsc = strings.NewReplacer("%", "%25", "~", "%7E", "/", "%2F")

// UpstreamKey is the Idempotency-Key an effect's target sees:
// UpstreamKey of its derived key in the tenant's name, which names its
// operation's namespace already.
func (e *Effect) UpstreamKey() string { return UpstreamKey(e.Tenant, NamespaceClients, e.Key) }

// MaxEffectBody bounds an effect's body, as a route's max_body bounds a
// request's: an effect is a call to make, not a file to store.
const MaxEffectBody = 1 << 20

// MaxEffectName bounds an effect's name, which its derived key carries.
const MaxEffectName = 64

// EffectParams is an effect to enqueue.
type EffectParams struct {
	Tenant string
	// Namespace is the operation's: "" (NamespaceClients) for the keys
	// of the tenant's clients, the operations a Go service reserves.
	Namespace    string
	OperationKey string
	Name         string // 1 to 64 of A-Z a-z 0-9 . _ : -
	Target       string
	Method       string // default POST
	Path         string
	Header       map[string][]string
	Body         []byte
	// Retention is how long a final effect is kept (0: DefaultEffectRetention).
	Retention time.Duration
}

// DefaultEffectRetention is how long a final effect is remembered.
const DefaultEffectRetention = 7 * 24 * time.Hour

// Key is the effect's derived key.
func (p EffectParams) Key() string { return EffectKey(p.Namespace, p.OperationKey, p.Name) }

// Validate refuses an effect no store should write, so that both stores
// answer bad input alike, before any driver sees it. Method is expected
// filled in (WithDefaults).
func (p EffectParams) Validate() error {
	if err := texts(map[string]string{"tenant": p.Tenant, "target": p.Target}); err != nil {
		return err
	}
	switch {
	case !validNamespace(p.Namespace):
		return invalid("an effect's namespace must be 1 to %d bytes of UTF-8 text", MaxNamespaceLen)
	case p.OperationKey == "" || len(p.OperationKey) > MaxKeyLen || !cleanText(p.OperationKey):
		return invalid("an effect's operation key must be 1 to %d bytes of UTF-8 text", MaxKeyLen)
	case !effectName(p.Name):
		return invalid("effect name %q: want 1 to %d of letters, digits, '.', '_', ':' and '-'", p.Name, MaxEffectName)
	case p.Method == "" || strings.ToUpper(p.Method) != p.Method || strings.ContainsAny(p.Method, " \t\r\n/"):
		return invalid("effect method %q: want an upper-case HTTP method", p.Method)
	case !strings.HasPrefix(p.Path, "/") || strings.ContainsAny(p.Path, " \r\n\x00#"):
		return invalid("effect path %q: want an absolute path (and query), /v1/…", p.Path)
	case p.Retention < 0:
		return invalid("effect retention %v: want 0 (the default) or more", p.Retention)
	case len(p.Body) > MaxEffectBody:
		return invalid("effect body of %d bytes: at most %d", len(p.Body), MaxEffectBody)
	}
	for name, vs := range p.Header {
		if name == "" || strings.ContainsAny(name, " \t\r\n:\x00") {
			return invalid("effect header %q: not a header name", name)
		}
		for _, v := range vs {
			if strings.ContainsAny(v, "\r\n\x00") {
				return invalid("effect header %q: a value without CR, LF or NUL", name)
			}
		}
	}
	return nil
}

// WithDefaults fills in what an effect may leave out.
func (p EffectParams) WithDefaults() EffectParams {
	if p.Method == "" {
		p.Method = "POST"
	}
	if p.Retention == 0 {
		p.Retention = DefaultEffectRetention
	}
	if p.Namespace == "" {
		p.Namespace = NamespaceClients
	}
	return p
}

// effectName reports whether name can name an effect: not '/', which
// joins it to its operation's key (so the name is the key's last
// segment, and two effects never derive one key).
func effectName(name string) bool {
	if name == "" || len(name) > MaxEffectName {
		return false
	}
	for _, r := range name {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._:-", r)
		if !ok {
			return false
		}
	}
	return true
}

// Fingerprint is "sha256:" and the hex SHA-256 of the JSON of what the
// effect does: target, method, path, header (names canonical, sorted) and
// body. Its key is bound to it.
func (p EffectParams) Fingerprint() string {
	header := map[string][]string{}
	for k, v := range p.Header {
		header[textproto.CanonicalMIMEHeaderKey(k)] = slices.Clone(v)
	}
	b, _ := json.Marshal(struct {
		Target string              `json:"target"`
		Method string              `json:"method"`
		Path   string              `json:"path"`
		Header map[string][]string `json:"header"`
		Body   []byte              `json:"body"`
	}{p.Target, p.Method, p.Path, header, p.Body})
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// EffectClaimParams asks for effects to deliver: of the given targets,
// those due and held by no other relay, at most Limit.
type EffectClaimParams struct {
	Targets []string
	Limit   int
	// Lease is how long a delivery is the claimant's alone. Once it lapses
	// the effect is unknown (it was sent, maybe delivered) and another
	// relay may claim it; a late result of the first is refused (fenced).
	Lease time.Duration
	// MaxAttempts parks an effect whose lapsed lease used its last
	// attempt, instead of making it due again (0: no bound).
	MaxAttempts int
}

// Validate refuses a claim without targets, limit or lease.
func (p EffectClaimParams) Validate() error {
	switch {
	case len(p.Targets) == 0 || p.Limit <= 0:
		return invalid("an effect claim needs targets and a positive limit")
	case p.Lease < MinDuration:
		return invalid("effect lease %v: want at least %v", p.Lease, MinDuration)
	case p.MaxAttempts < 0:
		return invalid("max attempts %d: want 0 (no bound) or more", p.MaxAttempts)
	}
	for _, t := range p.Targets {
		if t == "" || !cleanText(t) {
			return invalid("target must be non-empty UTF-8 text")
		}
	}
	return nil
}

// EffectLease is a relay's claim on one effect's delivery.
type EffectLease struct {
	EffectID string
	Token    string
	Fence    int64
	Until    time.Time
}

// EffectClaim is an effect claimed for delivery, as it stands (executing,
// its attempt counted), with the claim's lease.
type EffectClaim struct {
	Effect *Effect
	Lease  EffectLease
}

// EffectOutcome is how a delivery ended, by error family (docs/design.md's
// outcome mapping): succeeded or failed on an answer; prepared when
// nothing was delivered (unreachable, 429); unknown when it was sent and
// no answer came, or a 5xx. A prepared or unknown effect is due again
// RetryIn after the store's now (its clock, as every time it keeps), or
// parked: it waits for an operator.
type EffectOutcome struct {
	State     State
	Status    int
	ResultRef string
	ErrorCode string
	RetryIn   time.Duration
	Park      bool
}

// Validate refuses an outcome a store cannot record as it stands.
func (o EffectOutcome) Validate() error {
	switch {
	case o.State != Succeeded && o.State != Failed && o.State != Prepared && o.State != Unknown:
		return invalid("an effect's delivery ends succeeded, failed, prepared or unknown, not %s", o.State)
	case o.State.Final() && (o.RetryIn != 0 || o.Park):
		return invalid("a final effect is due never, nor parked")
	case o.RetryIn < 0:
		return invalid("retry in %v: want 0 (now) or more", o.RetryIn)
	case o.Status < 0 || o.Status > 999:
		return invalid("status %d: want three digits, or 0 for none", o.Status)
	case !cleanText(o.ResultRef) || !cleanText(o.ErrorCode):
		return invalid("result reference and error code must be UTF-8 text")
	}
	return nil
}

// EffectResult is one delivery's outcome to record under its claim's
// lease, as SettleEffects takes it.
type EffectResult struct {
	Lease   EffectLease
	Outcome EffectOutcome
}

// EffectSettle is a relay's turn: the outcomes of the deliveries that
// ended, and, when Claim.Limit is positive, a claim for the places they
// freed. A turn with no claim only records.
type EffectSettle struct {
	Results []EffectResult
	Claim   EffectClaimParams
}

// Validate refuses a turn with an outcome or a claim a store cannot take.
func (p EffectSettle) Validate() error {
	for _, r := range p.Results {
		if err := r.Outcome.Validate(); err != nil {
			return err
		}
	}
	if p.Claim.Limit == 0 && len(p.Claim.Targets) == 0 {
		return nil
	}
	return p.Claim.Validate()
}

// EffectSettled is what a turn did: per result, in order, the store's
// answer as EffectResult gives it (nil: recorded); then the claims.
type EffectSettled struct {
	Recorded []error
	Claims   []EffectClaim
}

// EffectResolveParams is an operator's decision about an effect that is
// not final and not executing (a parked one, or one whose delivery is
// unknown): succeeded or failed (with what the operator found at the
// target), or prepared to deliver it again now. A failed effect may be
// made prepared too, once its cause is mended: a definite refusal holds
// the effects behind it, and this is how its operation resumes.
type EffectResolveParams struct {
	ID        string
	Tenant    string // the effect's: another tenant's is not found
	To        State
	Actor     string
	Note      string
	ResultRef string
}

// Validate requires a named actor and a note, as an operation's
// resolution does.
func (p EffectResolveParams) Validate() error {
	switch {
	case p.ID == "" || p.Tenant == "":
		return invalid("an effect's resolution needs its id and tenant")
	case p.To != Succeeded && p.To != Failed && p.To != Prepared:
		return invalid("an effect resolves to succeeded, failed or prepared, not %s", p.To)
	case p.Actor == "" || !cleanText(p.Actor):
		return invalid("resolve needs a named actor")
	case p.Note == "" || !cleanText(p.Note) || !cleanText(p.ResultRef):
		return invalid("resolve needs a note, in UTF-8 text")
	}
	return nil
}
