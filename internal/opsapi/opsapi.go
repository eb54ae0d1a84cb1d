// Package opsapi is the reference upstream of the drills and the demo: a
// small operations API (tickets, payments, deployments) in SQLite. In its
// default mode it is itself a correct idempotent API, built on httpidem and
// the ledger, with each business write and its operation's completion in
// one transaction. In naive mode it ignores keys and business identities,
// as most legacy APIs do, so that what the drills measure is the gateway.
// GET /v1/effects counts every effect it performed: the drills' ground truth.
package opsapi

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/idemgate/idemgate/fingerprint"
	"github.com/idemgate/idemgate/httpidem"
	"github.com/idemgate/idemgate/ledger"
	"github.com/idemgate/idemgate/store/sqlite"
)

// Options configure the API.
type Options struct {
	Path   string // the SQLite file, shared by the business tables and the ledger
	Naive  bool   // ignore Idempotency-Key and business identities
	Faults bool   // accept POST /_faults
	// DeployDuration is how long the simulated controller takes to roll a
	// deployment out (default 2s).
	DeployDuration time.Duration
	// Synchronous is the SQLite synchronous mode (default FULL).
	Synchronous string
	// Lease is each write's lease in default mode (httpidem's default when
	// zero): how long a killed worker's operation stays in progress.
	Lease time.Duration
	// Now is the simulated controller's clock (time.Now when nil): a test
	// moves it instead of waiting for a rollout.
	Now func() time.Time
}

// Server is the API.
type Server struct {
	opts   Options
	db     *sql.DB
	ledger *sqlite.Store
	faults *faults
	now    func() time.Time
	// capturing counts the captures in progress (payments.go).
	capturing inProgress
}

// New opens (creating if needed) the database and its tables.
func New(ctx context.Context, opts Options) (*Server, error) {
	if opts.DeployDuration <= 0 {
		opts.DeployDuration = 2 * time.Second
	}
	st, err := sqlite.Open(ctx, opts.Path, sqlite.Options{Synchronous: opts.Synchronous})
	if err != nil {
		return nil, err
	}
	if err := st.Migrate(ctx); err != nil {
		st.Close()
		return nil, err
	}
	db, err := sql.Open("sqlite", "file:"+opts.Path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		st.Close()
		return nil, err
	}
	db.SetMaxOpenConns(1) // one business writer, like the ledger's
	s := &Server{opts: opts, db: db, ledger: st, faults: &faults{}, now: time.Now}
	if opts.Now != nil {
		s.now = opts.Now
	}
	if _, err := db.ExecContext(ctx, schema); err != nil {
		s.Close()
		return nil, fmt.Errorf("opsapi schema: %w", err)
	}
	return s, nil
}

// Close closes the databases.
func (s *Server) Close() error { return errors.Join(s.db.Close(), s.ledger.Close()) }

const schema = `
CREATE TABLE IF NOT EXISTS effects (kind TEXT PRIMARY KEY, n INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS tickets (id INTEGER PRIMARY KEY, project TEXT NOT NULL, title TEXT NOT NULL,
	priority INTEGER NOT NULL, description TEXT NOT NULL, source_event_id TEXT, status TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS comments (ticket_id INTEGER NOT NULL, comment_id TEXT NOT NULL, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS intents (id INTEGER PRIMARY KEY, order_id TEXT NOT NULL, amount_minor INTEGER NOT NULL,
	currency TEXT NOT NULL, payee TEXT NOT NULL, invoice_ref TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS captures (id INTEGER PRIMARY KEY, intent_id INTEGER NOT NULL, amount_minor INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS refunds (id INTEGER PRIMARY KEY, refund_id TEXT NOT NULL, intent_id INTEGER NOT NULL,
	amount_minor INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS deployments (id INTEGER PRIMARY KEY, service TEXT NOT NULL, environment TEXT NOT NULL,
	artifact TEXT NOT NULL, kind TEXT NOT NULL, started_us INTEGER NOT NULL, cancelled INTEGER NOT NULL DEFAULT 0);
`

// Handler serves the API. In default mode the writes run under httpidem,
// with the tenant taken from X-Tenant ("default" without one).
func (s *Server) Handler() (http.Handler, error) {
	mux := http.NewServeMux()
	s.routeTickets(mux)
	s.routePayments(mux)
	s.routeDeployments(mux)
	mux.HandleFunc("GET /v1/effects", s.effects)
	mux.HandleFunc("POST /_faults", s.setFaults)
	mux.HandleFunc("GET /_faults", s.getFaults)
	if s.opts.Naive {
		return mux, nil
	}
	var routes []httpidem.Route
	for _, p := range []string{"POST /v1/tickets", "POST /v1/tickets/{id}/comments", "PUT /v1/tickets/{id}/status",
		"POST /v1/payment-intents", "POST /v1/payment-intents/{id}/capture", "POST /v1/refunds",
		"POST /v1/deployments", "POST /v1/rollbacks"} {
		method, pattern, _ := strings.Cut(p, " ")
		require := true
		routes = append(routes, httpidem.Route{Method: method, Pattern: pattern, RequireKey: &require,
			Lease: s.opts.Lease})
	}
	m, err := httpidem.New(httpidem.Options{Store: s.ledger, Routes: routes, Actor: "opsapi",
		Tenant: func(r *http.Request) (string, error) {
			if t := r.Header.Get("X-Tenant"); t != "" {
				return t, nil
			}
			return "default", nil
		}})
	if err != nil {
		return nil, err
	}
	return m.Handler(mux), nil
}

// apiError is a refusal with its status.
type apiError struct {
	status int
	msg    string
}

func (e *apiError) Error() string { return e.msg }

func refuse(status int, format string, args ...any) error {
	return &apiError{status: status, msg: fmt.Sprintf(format, args...)}
}

// result is what a write answers.
type result struct {
	status int
	body   any
}

// write runs fn as one business transaction: faults first, then fn, then,
// in default mode, the operation's completion in the same transaction, the
// commit, and the answer.
func (s *Server) write(w http.ResponseWriter, r *http.Request, fn func(tx *sql.Tx) (result, error)) {
	s.faults.inFlight.Add(1)
	defer s.faults.inFlight.Add(-1)
	if s.faults.before(w) {
		return
	}
	// Once accepted, a write runs to its end even if the caller hangs up,
	// as most servers do: that is how an effect outlives its answer.
	ctx := context.WithoutCancel(r.Context())
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		answer(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error()})
		return
	}
	defer tx.Rollback()
	res, err := fn(tx)
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		answer(w, ae.status, map[string]string{"error": ae.msg})
		return
	case err != nil:
		answer(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
		return
	}
	if s.faults.failBeforeCommit() {
		answer(w, http.StatusInternalServerError, map[string]string{"error": "injected failure before commit"})
		return
	}
	body := encode(res.body)
	exec := httpidem.Current(r)
	if exec != nil && !s.opts.Naive {
		resp := &ledger.Response{Status: res.status, Header: http.Header{"Content-Type": {"application/json"}}, Body: body}
		if _, err := s.ledger.Tx(tx).Complete(ctx, exec.Lease(), ledger.Outcome{State: ledger.Succeeded,
			Response: resp, Reason: "committed with the business write"}); err != nil {
			answer(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
			return
		}
	}
	if err := tx.Commit(); err != nil {
		answer(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error()})
		return
	}
	if exec != nil && !s.opts.Naive {
		exec.Completed()
	}
	if s.faults.dropAfterCommit(w) {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(res.status)
	_, _ = w.Write(body)
}

func answer(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(encode(v))
}

// encode writes JSON as people read it: "<" stays "<".
func encode(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	return b.Bytes()
}

// bump counts one effect of kind, in the transaction that performs it.
func bump(tx *sql.Tx, kind string) error {
	_, err := tx.Exec(`INSERT INTO effects (kind, n) VALUES (?, 1) ON CONFLICT (kind) DO UPDATE SET n = n + 1`, kind)
	return err
}

// Effect kinds reported by GET /v1/effects.
var effectKinds = []string{"tickets_created", "comments_added", "intents_created", "captures", "refunds",
	"deployments_started", "rollbacks"}

func (s *Server) effects(w http.ResponseWriter, r *http.Request) {
	out := map[string]int{}
	for _, k := range effectKinds {
		out[k] = 0
	}
	rows, err := s.db.QueryContext(r.Context(), `SELECT kind, n FROM effects`)
	if err != nil {
		answer(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
		return
	}
	defer rows.Close()
	for rows.Next() {
		var k string
		var n int
		if rows.Scan(&k, &n) == nil {
			out[k] = n
		}
	}
	answer(w, http.StatusOK, out)
}

// decode reads a strict JSON object body (the fingerprint parser: no
// duplicate members, no unsafe integers).
func decode(r *http.Request) (map[string]any, error) {
	data, err := io.ReadAll(io.LimitReader(r.Body, 1<<20+1))
	if err != nil {
		return nil, refuse(http.StatusBadRequest, "body: %v", err)
	}
	v, err := fingerprint.Parse(data, fingerprint.Limits{})
	if err != nil {
		return nil, refuse(http.StatusUnprocessableEntity, "body: %v", err)
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, refuse(http.StatusUnprocessableEntity, "body: want a JSON object")
	}
	return obj, nil
}

// str reads a required (or optional) string member.
func str(obj map[string]any, name string, required bool) (string, error) {
	v, ok := obj[name]
	if !ok || v == nil {
		if required {
			return "", refuse(http.StatusUnprocessableEntity, "%s is required", name)
		}
		return "", nil
	}
	s, ok := v.(string)
	if !ok || (required && s == "") {
		return "", refuse(http.StatusUnprocessableEntity, "%s must be a non-empty string", name)
	}
	return s, nil
}

// integer reads a member that must be a JSON integer (no fraction, no
// exponent, not a string): amounts are exact minor units.
func integer(obj map[string]any, name string) (int64, error) {
	n, ok := obj[name].(json.Number)
	if !ok || strings.ContainsAny(string(n), ".eE") {
		return 0, refuse(http.StatusUnprocessableEntity, "%s must be an integer (minor units), not %v", name, obj[name])
	}
	v, err := n.Int64()
	if err != nil {
		return 0, refuse(http.StatusUnprocessableEntity, "%s: %v", name, err)
	}
	return v, nil
}
