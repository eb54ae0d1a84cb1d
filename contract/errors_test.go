package contract_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/fingerprint"
	"github.com/idemgate/idemgate/ledger"
)

// TestProblemFor: the one error→status map. The ledger's errors and the
// parsers' refusals, however wrapped, get docs/design.md's codes and
// statuses; anything else is internal, and says nothing of itself.
func TestProblemFor(t *testing.T) {
	_, tooLarge := fingerprint.Parse([]byte(`[1]`), fingerprint.Limits{MaxBytes: 1})
	_, bad := fingerprint.Parse([]byte(`{"a":1,"a":2}`), fingerprint.Limits{})
	for _, c := range []struct {
		err    error
		code   string
		status int
	}{
		{fmt.Errorf("reserve: %w", ledger.ErrFingerprintMismatch), contract.CodeFingerprintMismatch, 422},
		{ledger.ErrConcurrencyLocked, contract.CodeConcurrencyLocked, 409},
		{ledger.ErrApprovalMismatch, contract.CodeApprovalMismatch, 409},
		{ledger.ErrApprovalClosed, contract.CodeApprovalClosed, 409},
		{ledger.ErrForbidden, contract.CodeForbidden, 403},
		{ledger.ErrNotFound, contract.CodeNotFound, 404},
		{ledger.ErrUnavailable, contract.CodeStoreUnavailable, 503},
		{ledger.ErrNoSchema, contract.CodeStoreUnavailable, 503},
		{ledger.ErrIllegalTransition, contract.CodeIllegalTransition, 409},
		{ledger.ErrStaleOwner, contract.CodeLeaseLost, 409},
		// A lapsed lease is both stale and an illegal move: its owner hears lease_lost.
		{ledger.OwnerError(ledger.StepComplete, ledger.Lease{OpID: "op_1", Fence: 1},
			&ledger.Operation{Fence: 1, State: ledger.Unknown}, ledger.Succeeded), contract.CodeLeaseLost, 409},
		{fmt.Errorf("resolve: %w: no note", ledger.ErrInvalid), contract.CodeInvalidCommand, 422},
		{tooLarge, contract.CodePayloadTooLarge, 413},
		{bad, contract.CodeInvalidCommand, 422},
		{fmt.Errorf("body: %w: text/plain", fingerprint.ErrUnsupportedMediaType), contract.CodeUnsupportedMediaType, 415},
		{contract.NewProblem(contract.CodeRateLimited, "slow down"), contract.CodeRateLimited, 429},
		{errors.New("driver: secret DSN"), contract.CodeInternal, 500},
	} {
		p := contract.ProblemFor(c.err)
		if p.Code != c.code || p.Status != c.status || p.Status != contract.StatusOf(c.code) {
			t.Errorf("%v: %s %d, want %s %d", c.err, p.Code, p.Status, c.code, c.status)
		}
		if p.Code == contract.CodeInternal && strings.Contains(p.Detail, "secret") {
			t.Errorf("internal problem tells its cause: %q", p.Detail)
		}
	}
}

// TestProblemWrite: a problem is sent as problem+json, never cached, with
// Retry-After and the operation's header when it names this key's, and
// the code is told to the writer that keeps it (the metrics' observer).
func TestProblemWrite(t *testing.T) {
	op := &ledger.Operation{ID: "op_1", State: ledger.Executing}
	rec := &noter{ResponseRecorder: httptest.NewRecorder()}
	p := contract.ProblemFor(ledger.ErrConcurrencyLocked).For(op, contract.ControlPrefix)
	p.Write(wrapped{rec})
	got, ok := contract.ReadProblem(rec.Header(), rec.Body.Bytes())
	if !ok || rec.Code != 409 || got.StatusURL != "/_idem/v1/operations/op_1" || got.OperationID != "op_1" ||
		rec.Header().Get("Retry-After") != "1" || rec.Header().Get(contract.HeaderOperation) != "" ||
		rec.Header().Get("Cache-Control") != "no-store" || rec.code != contract.CodeConcurrencyLocked {
		t.Fatalf("%d %v %s (noted %q)", rec.Code, rec.Header(), rec.Body, rec.code)
	}
	rec = &noter{ResponseRecorder: httptest.NewRecorder()}
	contract.NewProblem(contract.CodeInProgress, "wait").For(op, "").Write(rec)
	if rec.Header().Get(contract.HeaderOperation) != "op_1" || strings.Contains(rec.Body.String(), "status_url") {
		t.Fatalf("%v %s", rec.Header(), rec.Body)
	}
}

type noter struct {
	*httptest.ResponseRecorder
	code string
}

func (n *noter) NoteCode(code string) { n.code = code }

// wrapped hides the noter behind Unwrap, as middleware wrap writers.
type wrapped struct{ w *noter }

func (w wrapped) Header() http.Header         { return w.w.Header() }
func (w wrapped) Write(b []byte) (int, error) { return w.w.Write(b) }
func (w wrapped) WriteHeader(s int)           { w.w.WriteHeader(s) }
func (w wrapped) Unwrap() http.ResponseWriter { return w.w }
