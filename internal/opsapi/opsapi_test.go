package opsapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/opsapi"
)

type client struct {
	t     *testing.T
	url   string
	n     int
	clock *clock
}

// clock is the API's controller clock, moved by the test: a rollout's
// states are read at chosen times, never raced.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func start(t *testing.T, naive, faults bool) *client {
	clk := &clock{now: time.Now()}
	s, err := opsapi.New(context.Background(), opsapi.Options{Path: filepath.Join(t.TempDir(), "ops.db"),
		Naive: naive, Faults: faults, DeployDuration: 400 * time.Millisecond, Synchronous: "OFF", Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	h, err := s.Handler()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &client{t: t, url: srv.URL, clock: clk}
}

// call sends a request; key "" means a fresh key for every write.
func (c *client) call(method, path, key, body string) (int, map[string]any) {
	c.t.Helper()
	req, _ := http.NewRequest(method, c.url+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if method != "GET" {
		if key == "" {
			c.n++
			key = fmt.Sprintf("auto-%d", c.n)
		}
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := noRetry.Do(req)
	if err != nil {
		return 0, map[string]any{"transport_error": err.Error()}
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	out := map[string]any{}
	_ = json.Unmarshal(data, &out)
	if resp.Header.Get("Retry-After") != "" {
		out["retry_after"] = resp.Header.Get("Retry-After")
	}
	return resp.StatusCode, out
}

// noRetry never reuses a connection: Go's transport re-sends a request that
// carries an Idempotency-Key when a reused connection fails, which would
// hide the dropped answers these tests inject.
var noRetry = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

func (c *client) effects() map[string]float64 {
	_, e := c.call("GET", "/v1/effects", "", "")
	out := map[string]float64{}
	for k, v := range e {
		out[k], _ = v.(float64)
	}
	return out
}

func TestTickets(t *testing.T) {
	c := start(t, false, false)
	s, first := c.call("POST", "/v1/tickets", "", `{"project":"ops","title":"DB down","source_event_id":"alert-1"}`)
	s2, dup := c.call("POST", "/v1/tickets", "", `{"project":"ops","title":"database is down!","source_event_id":"alert-1"}`)
	if s != 201 || first["created"] != true || s2 != 200 || dup["created"] != false || dup["id"] != first["id"] {
		t.Fatalf("source_event_id: %d %v, %d %v", s, first, s2, dup)
	}
	if s, _ := c.call("POST", "/v1/tickets", "", `{"project":"web","title":"DB down","source_event_id":"alert-1"}`); s != 201 {
		t.Fatalf("another project's alert: %d", s)
	}
	id := fmt.Sprint(first["id"])
	for range 2 {
		c.call("POST", "/v1/tickets/"+id+"/comments", "", `{"comment_id":"c-1","body":"looking"}`)
		c.call("PUT", "/v1/tickets/"+id+"/status", "", `{"status":"resolved"}`)
	}
	if _, got := c.call("GET", "/v1/tickets/"+id, "", ""); got["status"] != "resolved" {
		t.Fatalf("status: %v", got)
	}
	if s, _ := c.call("POST", "/v1/tickets", "", `{"project":"ops"}`); s != 422 {
		t.Fatalf("no title: %d", s)
	}
	e := c.effects()
	if e["tickets_created"] != 2 || e["comments_added"] != 1 {
		t.Fatalf("effects %v", e)
	}
}

func TestPayments(t *testing.T) {
	c := start(t, false, false)
	for _, bad := range []string{`"amount_minor":19.99`, `"amount_minor":"1999"`, `"amount_minor":1e3`,
		`"amount_minor":1999,"currency":"XYZ"`, `"amount_minor":-5`} {
		body := `{"order_id":"o-1","currency":"EUR","payee":"ACME","invoice_ref":"INV-1",` + bad + `}`
		if s, _ := c.call("POST", "/v1/payment-intents", "", body); s != 422 {
			t.Errorf("%s: %d", bad, s)
		}
	}
	body := `{"order_id":"o-1","amount_minor":1999,"currency":"EUR","payee":"ACME","invoice_ref":"INV-1"}`
	s, in := c.call("POST", "/v1/payment-intents", "", body)
	s2, again := c.call("POST", "/v1/payment-intents", "", body)
	if s != 201 || s2 != 200 || again["id"] != in["id"] {
		t.Fatalf("one intent per order: %d %v, %d %v", s, in, s2, again)
	}
	id := fmt.Sprint(in["id"])
	_, c1 := c.call("POST", "/v1/payment-intents/"+id+"/capture", "", ``)
	_, c2 := c.call("POST", "/v1/payment-intents/"+id+"/capture", "", ``)
	if c1["capture_id"] == nil || c2["capture_id"] != c1["capture_id"] {
		t.Fatalf("capture twice: %v %v", c1, c2)
	}
	refund := func(rid string, amount int) int {
		s, _ := c.call("POST", "/v1/refunds", "", fmt.Sprintf(`{"refund_id":%q,"payment_intent_id":%s,"amount_minor":%d}`, rid, id, amount))
		return s
	}
	if refund("r-1", 1000) != 201 || refund("r-1", 1000) != 200 || refund("r-2", 1000) != 422 || refund("r-3", 999) != 201 {
		t.Fatal("refunds must stay within the captured amount, and a refund_id is one instruction")
	}
	if _, got := c.call("GET", "/v1/payment-intents?invoice_ref=INV-1", "", ""); len(got["payment_intents"].([]any)) != 1 ||
		got["payment_intents"].([]any)[0].(map[string]any)["captured_minor"] != in["amount_minor"] || in["amount_minor"] == nil {
		t.Fatalf("lookup by invoice, with the amount captured once: %v", got)
	}
	if s, _ := c.call("GET", "/v1/refunds/r-1", "", ""); s != 200 {
		t.Fatalf("refund lookup: %d", s)
	}
	e := c.effects()
	if e["intents_created"] != 1 || e["captures"] != 1 || e["refunds"] != 2 {
		t.Fatalf("effects %v", e)
	}
}

func TestDeployments(t *testing.T) {
	c := start(t, false, false)
	commit := strings.Repeat("a", 40)
	for _, tag := range []string{"main", "latest", "v1.2.3", strings.Repeat("A", 40)} {
		s, got := c.call("POST", "/v1/deployments", "", `{"service":"api","environment":"production","artifact":"`+tag+`"}`)
		if s != 422 || !strings.Contains(fmt.Sprint(got["error"]), "immutable") {
			t.Errorf("%s: %d %v", tag, s, got)
		}
	}
	s, d1 := c.call("POST", "/v1/deployments", "", `{"service":"api","environment":"production","artifact":"`+commit+`"}`)
	s2, locked := c.call("POST", "/v1/deployments", "", `{"service":"api","environment":"production","artifact":"sha256:`+strings.Repeat("b", 64)+`"}`)
	if s != 201 || s2 != 409 || !strings.Contains(fmt.Sprint(locked["error"]), fmt.Sprint(d1["id"])) {
		t.Fatalf("one active deployment: %d %v, %d %v", s, d1, s2, locked)
	}
	id := fmt.Sprint(d1["id"])
	var seen []string
	for range 3 {
		_, got := c.call("GET", "/v1/deployments/"+id, "", "")
		seen = append(seen, fmt.Sprint(got["state"]))
		c.clock.advance(200 * time.Millisecond)
	}
	if fmt.Sprint(seen) != "[queued running succeeded]" {
		t.Fatalf("states seen at 0, 200 and 400ms: %v", seen)
	}
	moved := `{"service":"api","environment":"production","artifact":"` + strings.Repeat("c", 40) + `","expected_current_version":"` + strings.Repeat("9", 40) + `"}`
	if s, _ := c.call("POST", "/v1/deployments", "", moved); s != 409 {
		t.Fatalf("expected_current_version: %d", s)
	}
	s, rb := c.call("POST", "/v1/rollbacks", "", `{"service":"api","environment":"production","to_artifact":"`+commit+`"}`)
	if s != 201 || rb["kind"] != "rollback" || rb["id"] == d1["id"] {
		t.Fatalf("rollback: %d %v", s, rb)
	}
	if e := c.effects(); e["deployments_started"] != 1 || e["rollbacks"] != 1 {
		t.Fatalf("effects %v", e)
	}
	// The controller's two bad endings: failed, and unknown (which keeps
	// the environment locked, since the rollout may still be going).
	ends, ids := map[string]string{}, map[string]string{}
	for _, digest := range []string{"f00d", "dead"} {
		body := `{"service":"` + digest + `","environment":"staging","artifact":"sha256:` + digest + strings.Repeat("0", 60) + `"}`
		s, d := c.call("POST", "/v1/deployments", "", body)
		if s != 201 {
			t.Fatalf("%s: %d %v", digest, s, d)
		}
		id := fmt.Sprint(d["id"])
		ids[digest] = id
		c.clock.advance(400 * time.Millisecond)
		_, got := c.call("GET", "/v1/deployments/"+id, "", "")
		ends[digest] = fmt.Sprint(got["state"])
	}
	if ends["f00d"] != "failed" || ends["dead"] != "unknown" {
		t.Fatalf("ends: %v", ends)
	}
	again := `{"service":"dead","environment":"staging","artifact":"` + strings.Repeat("d", 40) + `"}`
	if s, got := c.call("POST", "/v1/deployments", "", again); s != 409 {
		t.Fatalf("after an unknown rollout: %d %v", s, got)
	}
	// A rollback replaces it: the unknown rollout is cancelled.
	if s, got := c.call("POST", "/v1/rollbacks", "", `{"service":"dead","environment":"staging","to_artifact":"`+
		strings.Repeat("e", 40)+`"}`); s != 201 {
		t.Fatalf("rollback: %d %v", s, got)
	}
	if _, got := c.call("GET", "/v1/deployments/"+ids["dead"], "", ""); got["state"] != "cancelled" {
		t.Fatalf("the unknown rollout after a rollback: %v", got)
	}
}

func TestDefaultModeIsIdempotentAndNaiveIsNot(t *testing.T) {
	for _, naive := range []bool{false, true} {
		c := start(t, naive, false)
		body := `{"project":"ops","title":"x","source_event_id":"e"}`
		s1, a := c.call("POST", "/v1/tickets", "same-key", body)
		s2, b := c.call("POST", "/v1/tickets", "same-key", body)
		c.call("POST", "/v1/tickets", "other-key", body)
		want := 1.0
		if naive {
			want = 3
		}
		if e := c.effects(); e["tickets_created"] != want || s1 != 201 {
			t.Fatalf("naive=%v: %v after %d %v, %d %v", naive, e, s1, a, s2, b)
		}
		if !naive {
			req, _ := http.NewRequest("POST", c.url+"/v1/tickets", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			resp, _ := http.DefaultClient.Do(req)
			resp.Body.Close()
			if resp.StatusCode != 400 {
				t.Fatalf("default mode without a key: %d", resp.StatusCode)
			}
		}
	}
}

// A held write is in flight, neither applied nor answered, until the
// release; the release ends the hold, so the next write goes through.
func TestHoldUntilRelease(t *testing.T) {
	c := start(t, true, true)
	body := `{"project":"ops","title":"held"}`
	c.call("POST", "/_faults", "", `{"hold":1}`)
	answered := make(chan int, 1)
	go func() { s, _ := c.call("POST", "/v1/tickets", "held", body); answered <- s }()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, f := c.call("GET", "/_faults", "", ""); f["in_flight"] == 1.0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the write never reached the API")
		}
	}
	if e := c.effects(); e["tickets_created"] != 0 || len(answered) != 0 {
		t.Fatalf("a held write was applied or answered: %v", e)
	}
	if _, f := c.call("POST", "/_faults", "", `{"release":true}`); f["hold"] != 0.0 {
		t.Fatalf("after the release: %v", f)
	}
	if s := <-answered; s != 201 {
		t.Fatalf("the released write: %d", s)
	}
	if s, _ := c.call("POST", "/v1/tickets", "", body); s != 201 {
		t.Fatalf("the next write: %d", s)
	}
	if e := c.effects(); e["tickets_created"] != 2 {
		t.Fatalf("effects %v", e)
	}
}

func TestFaults(t *testing.T) {
	if s, _ := start(t, true, false).call("POST", "/_faults", "", `{"delay_ms":1}`); s != 403 {
		t.Fatalf("faults without --faults: %d", s)
	}
	c := start(t, true, true)
	body := `{"project":"ops","title":"x"}`
	c.call("POST", "/_faults", "", `{"drop_response_after_commit":1}`)
	if s, got := c.call("POST", "/v1/tickets", "", body); s != 0 || got["transport_error"] == nil {
		t.Fatalf("dropped answer: %d %v", s, got)
	}
	c.call("POST", "/_faults", "", `{"fail_before_commit":1}`)
	if s, _ := c.call("POST", "/v1/tickets", "", body); s != 500 {
		t.Fatalf("failure before commit: %d", s)
	}
	c.call("POST", "/_faults", "", `{"status":{"code":429,"count":1}}`)
	if s, got := c.call("POST", "/v1/tickets", "", body); s != 429 || got["retry_after"] != "1" {
		t.Fatalf("injected 429: %d %v", s, got)
	}
	if s, _ := c.call("POST", "/v1/tickets", "", body); s != 201 {
		t.Fatalf("after the faults: %d", s)
	}
	if s, _ := c.call("POST", "/_faults", "", `{"drop":1}`); s != 422 {
		t.Fatalf("unknown fault: %d", s)
	}
	if e := c.effects(); e["tickets_created"] != 2 { // the dropped one and the last one
		t.Fatalf("effects %v", e)
	}
}
