package inbox_test

import (
	"testing"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/inbox"
	"github.com/idemgate/idemgate/ledger"
)

// Decide acknowledges only final operations, parks what can never run as
// it is and what is unknown (for a person to resolve, the message kept),
// and retries the rest.
func TestDecide(t *testing.T) {
	for _, c := range []struct {
		name string
		out  inbox.Outcome
		want inbox.Verdict
		why  string
	}{
		{"succeeded", inbox.Outcome{State: ledger.Succeeded}, inbox.Ack, "succeeded"},
		{"failed", inbox.Outcome{State: ledger.Failed}, inbox.Ack, "failed"},
		{"unknown", inbox.Outcome{State: ledger.Unknown}, inbox.Park, inbox.ReasonUnknown},
		{"outcome unknown", inbox.Outcome{Code: contract.CodeOutcomeUnknown, State: ledger.Unknown}, inbox.Park, inbox.ReasonUnknown},
		{"a replay", inbox.Outcome{Replayed: true}, inbox.Ack, "duplicate"},
		{"executing elsewhere", inbox.Outcome{Code: contract.CodeInProgress, State: ledger.Executing}, inbox.Retry, contract.CodeInProgress},
		{"released", inbox.Outcome{State: ledger.Prepared}, inbox.Retry, "state_prepared"},
		{"upstream down", inbox.Outcome{Code: contract.CodeUpstreamUnavailable, State: ledger.Prepared}, inbox.Retry, contract.CodeUpstreamUnavailable},
		{"rate limited", inbox.Outcome{Code: contract.CodeRateLimited}, inbox.Retry, contract.CodeRateLimited},
		{"store down", inbox.Outcome{Code: contract.CodeStoreUnavailable}, inbox.Retry, contract.CodeStoreUnavailable},
		{"conflict", inbox.Outcome{Code: contract.CodeFingerprintMismatch, State: ledger.Succeeded}, inbox.Park, inbox.ReasonConflict},
		{"no key", inbox.Outcome{Code: contract.CodeMissingKey}, inbox.Park, inbox.ReasonNoIdentity},
		{"bad key", inbox.Outcome{Code: contract.CodeInvalidKey}, inbox.Park, contract.CodeInvalidKey},
		{"bad body", inbox.Outcome{Code: contract.CodeInvalidCommand}, inbox.Park, contract.CodeInvalidCommand},
		{"not JSON", inbox.Outcome{Code: contract.CodeUnsupportedMediaType}, inbox.Park, contract.CodeUnsupportedMediaType},
	} {
		if d := inbox.Decide(c.out); d.Verdict != c.want || d.Reason != c.why {
			t.Errorf("%s: %+v, want verdict %d for %q", c.name, d, c.want, c.why)
		}
	}
}

func TestKeyFrom(t *testing.T) {
	m := inbox.Message{Header: map[string][]string{"Nats-Msg-Id": {"m-1"}, "event-id": {"e-1"}}, MessageID: "amqp-1",
		Body: []byte(`{"event":{"id":"b-1","n":12345678901234567890},"list":[1]}`)}
	for from, want := range map[string]string{"header:Nats-Msg-Id": "m-1", "header:nats-msg-id": "m-1",
		"header:Event-Id": "e-1", "message_id": "amqp-1", "body:/event/id": "b-1", "body:/event/n": "12345678901234567890",
		"body:/list": "", "body:/missing": "", "header:Other": ""} {
		k, err := inbox.ParseKeyFrom(from)
		if err != nil {
			t.Fatalf("%s: %v", from, err)
		}
		if got, ok := k.Of(m); got != want || ok != (want != "") {
			t.Errorf("%s: %q %v, want %q", from, got, ok, want)
		}
	}
	for _, bad := range []string{"", "header:", "body:", "body:x", "cookie:x", "header:a b", "message_id:x"} {
		if _, err := inbox.ParseKeyFrom(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// FuzzKeyFrom: any key_from either parses or is refused, and a parsed
// one reads any body without failing; a key it finds is never empty.
func FuzzKeyFrom(f *testing.F) {
	f.Add("body:/event_id", []byte(`{"event_id":"e-1"}`))
	f.Add("header:Nats-Msg-Id", []byte(`x`))
	f.Add("body:/a/0/b~1c", []byte(`{"a":[{"b/c":1.5e3}]}`))
	f.Add("message_id", []byte{})
	f.Fuzz(func(t *testing.T, from string, body []byte) {
		k, err := inbox.ParseKeyFrom(from)
		if err != nil {
			return
		}
		if k.String() != from {
			t.Fatalf("%q read back as %q", from, k.String())
		}
		m := inbox.Message{Body: body, Header: map[string][]string{"Nats-Msg-Id": {string(body)}}, MessageID: string(body)}
		if key, ok := k.Of(m); ok != (key != "") {
			t.Fatalf("%q on %q: %q %v", from, body, key, ok)
		}
	})
}

// A consumer is handed twice its concurrency, so that a freed slot is
// filled without a round trip to the broker, except at concurrency 1,
// whose order a message read ahead could break (handled while the one
// before it waits out a retry's delay).
func TestReadAhead(t *testing.T) {
	for c, want := range map[int]int{0: 1, 1: 1, 2: 4, 16: 32} {
		if got := inbox.ReadAhead(c); got != want {
			t.Errorf("concurrency %d: %d in flight, want %d", c, got, want)
		}
	}
}
