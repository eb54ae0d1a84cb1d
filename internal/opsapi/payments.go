package opsapi

import (
	"database/sql"
	"errors"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"sync"
)

func (s *Server) routePayments(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/payment-intents", s.createIntent)
	mux.HandleFunc("POST /v1/payment-intents/{id}/capture", s.capture)
	mux.HandleFunc("POST /v1/refunds", s.refund)
	mux.HandleFunc("GET /v1/payment-intents", s.findIntents)
	mux.HandleFunc("GET /v1/payment-intents/{id}", s.getIntent)
	mux.HandleFunc("GET /v1/refunds/{refund_id}", s.getRefund)
}

// currencies are the ISO 4217 codes this API takes.
var currencies = []string{"AUD", "BRL", "CAD", "CHF", "CNY", "CZK", "DKK", "EUR", "GBP", "HKD", "HUF", "INR", "JPY",
	"KRW", "MXN", "NOK", "NZD", "PLN", "SEK", "SGD", "TRY", "USD", "ZAR"}

type intent struct {
	ID          int64  `json:"id"`
	OrderID     string `json:"order_id"`
	AmountMinor int64  `json:"amount_minor"`
	Currency    string `json:"currency"`
	Payee       string `json:"payee"`
	InvoiceRef  string `json:"invoice_ref"`
	Created     *bool  `json:"created,omitempty"`
	// Captured is the amount captured so far, shown by lookups: what a
	// reconciliation of an unknown capture checks.
	Captured *int64 `json:"captured_minor,omitempty"`
	// Status is what a lookup by id says of the capture:
	// requires_capture, processing (a capture is being performed and has
	// not committed: neither yes nor no yet, as a payment provider says),
	// or captured.
	Status string `json:"status,omitempty"`
}

const intentColumns = `id, order_id, amount_minor, currency, payee, invoice_ref`

func scanIntent(row interface{ Scan(...any) error }) (intent, error) {
	var in intent
	err := row.Scan(&in.ID, &in.OrderID, &in.AmountMinor, &in.Currency, &in.Payee, &in.InvoiceRef)
	return in, err
}

var currencyCode = regexp.MustCompile(`^[A-Z]{3}$`)

func intentFrom(obj map[string]any) (intent, error) {
	var in intent
	var err error
	for name, dst := range map[string]*string{"order_id": &in.OrderID, "currency": &in.Currency, "payee": &in.Payee,
		"invoice_ref": &in.InvoiceRef} {
		if *dst, err = str(obj, name, true); err != nil {
			return in, err
		}
	}
	if !currencyCode.MatchString(in.Currency) || !slices.Contains(currencies, in.Currency) {
		return in, refuse(http.StatusUnprocessableEntity, "currency %q is not an ISO 4217 code this API takes", in.Currency)
	}
	if in.AmountMinor, err = integer(obj, "amount_minor"); err != nil {
		return in, err
	}
	if in.AmountMinor <= 0 {
		return in, refuse(http.StatusUnprocessableEntity, "amount_minor must be positive")
	}
	return in, nil
}

// createIntent: one payable intent per order; a second returns it, unless naive.
func (s *Server) createIntent(w http.ResponseWriter, r *http.Request) {
	obj, err := decode(r)
	if err == nil {
		var in intent
		if in, err = intentFrom(obj); err == nil {
			s.write(w, r, func(tx *sql.Tx) (result, error) { return s.insertIntent(tx, in) })
			return
		}
	}
	s.refused(w, err)
}

func (s *Server) insertIntent(tx *sql.Tx, in intent) (result, error) {
	if !s.opts.Naive {
		existing, err := scanIntent(tx.QueryRow(`SELECT `+intentColumns+` FROM intents WHERE order_id = ?`, in.OrderID))
		if err == nil {
			created := false
			existing.Created = &created
			return result{http.StatusOK, existing}, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return result{}, err
		}
	}
	res, err := tx.Exec(`INSERT INTO intents (order_id, amount_minor, currency, payee, invoice_ref) VALUES (?, ?, ?, ?, ?)`,
		in.OrderID, in.AmountMinor, in.Currency, in.Payee, in.InvoiceRef)
	if err != nil {
		return result{}, err
	}
	in.ID, _ = res.LastInsertId()
	created := true
	in.Created = &created
	return result{http.StatusCreated, in}, bump(tx, "intents_created")
}

// capture is the explicit second step; capturing twice returns the same
// capture, unless naive.
func (s *Server) capture(w http.ResponseWriter, r *http.Request) {
	id, _ := strconv.ParseInt(r.PathValue("id"), 10, 64)
	defer s.capturing.begin(id)()
	s.write(w, r, func(tx *sql.Tx) (result, error) {
		in, err := scanIntent(tx.QueryRow(`SELECT `+intentColumns+` FROM intents WHERE id = ?`, id))
		if errors.Is(err, sql.ErrNoRows) {
			return result{}, refuse(http.StatusNotFound, "no payment intent %d", id)
		}
		if err != nil {
			return result{}, err
		}
		var capID int64
		err = tx.QueryRow(`SELECT id FROM captures WHERE intent_id = ?`, id).Scan(&capID)
		if err == nil && !s.opts.Naive {
			return result{http.StatusOK, map[string]any{"capture_id": capID, "payment_intent_id": id,
				"amount_minor": in.AmountMinor, "currency": in.Currency, "captured": false}}, nil
		}
		res, err := tx.Exec(`INSERT INTO captures (intent_id, amount_minor) VALUES (?, ?)`, id, in.AmountMinor)
		if err != nil {
			return result{}, err
		}
		capID, _ = res.LastInsertId()
		return result{http.StatusCreated, map[string]any{"capture_id": capID, "payment_intent_id": id,
			"amount_minor": in.AmountMinor, "currency": in.Currency, "captured": true}}, bump(tx, "captures")
	})
}

// refund: refund_id is the stable instruction id, and the total refunded
// never exceeds the amount captured.
func (s *Server) refund(w http.ResponseWriter, r *http.Request) {
	obj, err := decode(r)
	var refundID string
	var intentID, amount int64
	if err == nil {
		refundID, err = str(obj, "refund_id", true)
	}
	if err == nil {
		intentID, err = integer(obj, "payment_intent_id")
	}
	if err == nil {
		amount, err = integer(obj, "amount_minor")
	}
	if err == nil && amount <= 0 {
		err = refuse(http.StatusUnprocessableEntity, "amount_minor must be positive")
	}
	if err != nil {
		s.refused(w, err)
		return
	}
	s.write(w, r, func(tx *sql.Tx) (result, error) { return s.insertRefund(tx, refundID, intentID, amount) })
}

func (s *Server) insertRefund(tx *sql.Tx, refundID string, intentID, amount int64) (result, error) {
	if !s.opts.Naive {
		var prevIntent, prevAmount int64
		err := tx.QueryRow(`SELECT intent_id, amount_minor FROM refunds WHERE refund_id = ?`, refundID).Scan(&prevIntent, &prevAmount)
		if err == nil {
			return result{http.StatusOK, map[string]any{"refund_id": refundID, "payment_intent_id": prevIntent,
				"amount_minor": prevAmount, "refunded": false}}, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return result{}, err
		}
	}
	var captured, refunded int64
	if err := tx.QueryRow(`SELECT coalesce(sum(amount_minor), 0) FROM captures WHERE intent_id = ?`, intentID).Scan(&captured); err != nil {
		return result{}, err
	}
	if err := tx.QueryRow(`SELECT coalesce(sum(amount_minor), 0) FROM refunds WHERE intent_id = ?`, intentID).Scan(&refunded); err != nil {
		return result{}, err
	}
	if refunded+amount > captured {
		return result{}, refuse(http.StatusUnprocessableEntity, "refunds would total %d, over the %d captured",
			refunded+amount, captured)
	}
	if _, err := tx.Exec(`INSERT INTO refunds (refund_id, intent_id, amount_minor) VALUES (?, ?, ?)`,
		refundID, intentID, amount); err != nil {
		return result{}, err
	}
	return result{http.StatusCreated, map[string]any{"refund_id": refundID, "payment_intent_id": intentID,
		"amount_minor": amount, "refunded": true}}, bump(tx, "refunds")
}

// findIntents looks intents up by order_id or invoice_ref, for reconciliation.
// getIntent is a lookup by id, with its capture's status: what a
// reconciliation probe of an unknown capture reads.
func (s *Server) getIntent(w http.ResponseWriter, r *http.Request) {
	id, _ := strconv.ParseInt(r.PathValue("id"), 10, 64)
	in, err := scanIntent(s.db.QueryRowContext(r.Context(), `SELECT `+intentColumns+` FROM intents WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		answer(w, http.StatusNotFound, map[string]string{"error": "no such payment intent"})
		return
	}
	in.Captured = new(int64)
	if err == nil {
		err = s.db.QueryRowContext(r.Context(), `SELECT coalesce(sum(amount_minor), 0) FROM captures WHERE intent_id = ?`,
			id).Scan(in.Captured)
	}
	if err != nil {
		answer(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
		return
	}
	switch {
	case *in.Captured > 0:
		in.Status = "captured"
	case s.capturing.busy(id):
		in.Status = "processing"
	default:
		in.Status = "requires_capture"
	}
	answer(w, http.StatusOK, in)
}

func (s *Server) findIntents(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	col, val := "order_id", q.Get("order_id")
	if val == "" {
		col, val = "invoice_ref", q.Get("invoice_ref")
	}
	if val == "" {
		answer(w, http.StatusBadRequest, map[string]string{"error": "look up by order_id or invoice_ref"})
		return
	}
	rows, err := s.db.QueryContext(r.Context(), `SELECT `+intentColumns+`,
		(SELECT coalesce(sum(amount_minor), 0) FROM captures WHERE intent_id = intents.id)
		FROM intents WHERE `+col+` = ? ORDER BY id`, val)
	if err != nil {
		answer(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
		return
	}
	defer rows.Close()
	out := []intent{}
	for rows.Next() {
		var in intent
		in.Captured = new(int64)
		err := rows.Scan(&in.ID, &in.OrderID, &in.AmountMinor, &in.Currency, &in.Payee, &in.InvoiceRef, in.Captured)
		if err != nil {
			answer(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
			return
		}
		out = append(out, in)
	}
	answer(w, http.StatusOK, map[string]any{"payment_intents": out})
}

func (s *Server) getRefund(w http.ResponseWriter, r *http.Request) {
	var intentID, amount int64
	err := s.db.QueryRowContext(r.Context(), `SELECT intent_id, amount_minor FROM refunds WHERE refund_id = ?`,
		r.PathValue("refund_id")).Scan(&intentID, &amount)
	if errors.Is(err, sql.ErrNoRows) {
		answer(w, http.StatusNotFound, map[string]string{"error": "no such refund"})
		return
	}
	if err != nil {
		answer(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
		return
	}
	answer(w, http.StatusOK, map[string]any{"refund_id": r.PathValue("refund_id"), "payment_intent_id": intentID,
		"amount_minor": amount})
}

// inProgress counts the captures being performed, by payment intent, from
// the moment a capture is received (before any fault's delay) until it is
// answered: a lookup meanwhile says processing, not requires_capture, so
// that a reconciliation probe never takes a capture still on its way for
// one that never happened.
type inProgress struct {
	mu sync.Mutex
	n  map[int64]int
}

// begin counts one capture of id, and returns its end.
func (p *inProgress) begin(id int64) (end func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n == nil {
		p.n = map[int64]int{}
	}
	p.n[id]++
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.n[id]--; p.n[id] == 0 {
			delete(p.n, id)
		}
	}
}

func (p *inProgress) busy(id int64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n[id] > 0
}
