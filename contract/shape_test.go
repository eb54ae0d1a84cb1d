package contract_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/ledger"
)

// TestShapes: a writer Shaped for Stripe, however deep beneath the writers
// that wrap it, gets Stripe's error object with the problem's code and
// members, the contract's status and headers (a concurrency lock names its
// holder in Idempotency-Locked-By), and Stripe-Should-Retry; the Shaped
// writer applied last (nearest the handler) wins; an unshaped writer gets
// RFC 9457's problem.
func TestShapes(t *testing.T) {
	holder := &ledger.Operation{ID: "op_holder", State: ledger.Executing}
	rec := &noter{ResponseRecorder: httptest.NewRecorder()}
	inner := contract.Shaped(wrapped{rec}, contract.ProblemShape)
	outer := contract.Shaped(layer{inner}, contract.StripeShape)
	contract.ProblemFor(ledger.ErrConcurrencyLocked).For(holder, contract.ControlPrefix).Write(layer{outer})
	var body struct {
		Error struct {
			Type, Code, Message string
			DocURL              string `json:"doc_url"`
			OperationID         string `json:"operation_id"`
			State               string
			StatusURL           string `json:"status_url"`
		}
	}
	h := rec.Header()
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || rec.Code != 409 ||
		h.Get("Content-Type") != "application/json" || h.Get("Stripe-Should-Retry") != "true" ||
		h.Get(contract.HeaderLockedBy) != "op_holder" || h.Get(contract.HeaderOperation) != "" ||
		h.Get(contract.HeaderState) != "executing" || h.Get(contract.HeaderStatusURL) != "/_idem/v1/operations/op_holder" ||
		h.Get("Retry-After") != "1" || rec.code != contract.CodeConcurrencyLocked {
		t.Fatalf("%d %v %s", rec.Code, h, rec.Body)
	}
	if e := body.Error; e.Type != "idempotency_error" || e.Code != "concurrency_locked" || e.Message == "" ||
		e.DocURL != contract.DocURL || e.OperationID != "op_holder" || e.State != "executing" ||
		e.StatusURL != "/_idem/v1/operations/op_holder" {
		t.Fatalf("%+v", e)
	}
	// Stripe's status for an idempotency_error no retry changes is 400 (its
	// v1 SDK raises StripeIdempotencyError only then); one a retry may
	// change keeps the contract's, and so does every other shape.
	for code, want := range map[string][2]int{contract.CodeFingerprintMismatch: {400, 422},
		contract.CodeOutcomeUnknown: {400, 409}, contract.CodeInProgress: {409, 409},
		contract.CodeStoreUnavailable: {503, 503}, contract.CodeUnauthorized: {401, 401}} {
		for i, shape := range []contract.Shape{contract.StripeShape, contract.ProblemShape} {
			rec := httptest.NewRecorder()
			p := contract.NewProblem(code, "x")
			if code == contract.CodeOutcomeUnknown {
				p.Status = 409
			}
			p.Write(contract.Shaped(rec, shape))
			if rec.Code != want[i] {
				t.Errorf("%s in shape %d: %d, want %d", code, i, rec.Code, want[i])
			}
		}
	}
	plain := httptest.NewRecorder()
	contract.NewProblem(contract.CodeOutcomeUnknown, "lost").For(&ledger.Operation{ID: "op_1", State: ledger.Unknown}, "").
		Write(plain)
	if p, ok := contract.ReadProblem(plain.Header(), plain.Body.Bytes()); !ok || p.OperationID != "op_1" ||
		plain.Header().Get(contract.HeaderState) != "unknown" || plain.Header().Get(contract.HeaderStatusURL) != "" ||
		plain.Header().Get("Stripe-Should-Retry") != "" {
		t.Fatalf("unshaped: %v %s", plain.Header(), plain.Body)
	}
}

// layer is a middleware's writer: it wraps another, reachable by Unwrap.
type layer struct{ http.ResponseWriter }

func (l layer) Unwrap() http.ResponseWriter { return l.ResponseWriter }
