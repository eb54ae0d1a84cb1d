package drill

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/idemgate/idemgate/inbox/webhook"
)

const hookSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// receiver is a webhook endpoint in this process: it verifies each
// delivery's signature (401 otherwise), and, if it dedupes, makes one
// effect per key (and, for GitHub, per body), as a signed webhook route
// of the gateway does. It notes every signature it accepted.
type receiver struct {
	v       *webhook.Verifier
	dedupe  bool
	mu      sync.Mutex
	effects int
	seen    map[string]bool
	sigs    map[string]bool
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet {
		rc.mu.Lock()
		defer rc.mu.Unlock()
		fmt.Fprintf(w, `{"n":%d}`, rc.effects)
		return
	}
	body, _ := io.ReadAll(r.Body)
	if rc.v.Verify(r.Header, body) != nil {
		w.WriteHeader(401)
		return
	}
	kind, where, _ := strings.Cut(rc.v.KeyFrom(), ":")
	key := r.Header.Get(where)
	if kind == "body" {
		key = string(body) // Stripe's id is in the body
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, h := range []string{"Webhook-Signature", "Stripe-Signature", "X-Hub-Signature-256"} {
		if s := r.Header.Get(h); s != "" {
			rc.sigs[s] = true
		}
	}
	digest := fmt.Sprintf("%x", sha256.Sum256(body))
	if !rc.dedupe || !rc.seen[key] && !(rc.v.DigestKey() && rc.seen[digest]) {
		rc.effects++
	}
	rc.seen[key], rc.seen[digest] = true, true
	w.WriteHeader(201)
}

func webhookScenario(target, scheme, secret string) string {
	return fmt.Sprintf(`target: %s
write: {method: POST, path: /hook, body: '{"type":"invoice.paid","n":{{.n}},"run":"{{.run}}"}'}
effects: {get: /effects, count: body.n}
webhook: {scheme: %s, secret: %q}
`, target, scheme, secret)
}

// TestWebhookWF10: wf-10 signs every delivery, re-signs each redelivery
// (the receiver accepts four signatures for one event; GitHub signs no
// timestamp, so its one signature comes five times, the last under a new
// delivery id), passes against a receiver
// that delivers each event once, and finds the duplicates of one that
// does not; against the wrong secret nothing is accepted and it fails.
func TestWebhookWF10(t *testing.T) {
	// Each sender's secret and its receiver's: the same but for Standard
	// Webhooks' v1a, whose sender signs with a private key (whsk_) and
	// whose receiver holds the public one (whpk_).
	for _, k := range []struct{ scheme, send, receive string }{
		{webhook.Standard, hookSecret, hookSecret}, {webhook.Stripe, "whsec_s", "whsec_s"}, {webhook.GitHub, "g", "g"},
		{webhook.Standard, "whsk_AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA=", "whpk_ebVWLo/mVPlAeLES6KmLp5AfhTrmlb7X4OORC60ElmQ="},
	} {
		for _, c := range []struct {
			dedupe   bool
			secret   string
			verdict  Verdict
			finding  string
			accepted int
		}{
			{true, k.send, Passed, "", 4},
			{false, k.send, FailedCheck, FindingDuplicate, 4},
			{true, "whsec_c2Vjb25kIHNlY3JldCBvZiAyNCBieXRlcw==", FailedCheck, FindingMissing, 0},
		} {
			v, err := webhook.New(webhook.Options{Scheme: k.scheme, Secrets: []string{k.receive}})
			if err != nil {
				t.Fatal(err)
			}
			rc := &receiver{v: v, dedupe: c.dedupe, seen: map[string]bool{}, sigs: map[string]bool{}}
			srv := httptest.NewServer(rc)
			s, err := ParseScenario("drill.yaml", []byte(webhookScenario(srv.URL, k.scheme, c.secret)))
			if err != nil {
				t.Fatal(err)
			}
			res, err := (&Runner{Scenario: s, Only: []string{"wf-10"}}).Run(context.Background())
			srv.Close()
			if err != nil || len(res) != 1 || res[0].Verdict != c.verdict || res[0].Finding != c.finding {
				t.Fatalf("%s %.8s, dedupe %t: %+v %v", k.scheme, k.send, c.dedupe, res, err)
			}
			want := c.accepted
			if k.scheme == webhook.GitHub && want > 0 {
				want = 1 // GitHub signs the body alone: a redelivery's signature is the same
			}
			if len(rc.sigs) != want {
				t.Fatalf("%s: %d signatures accepted, want %d (each redelivery re-signed)", k.scheme, len(rc.sigs), want)
			}
		}
	}
}

// TestWebhookScenario: the key goes where the scheme reads it; a bad
// scheme, an empty secret, and an idempotency naming another place are
// refused at their line.
func TestWebhookScenario(t *testing.T) {
	for scheme, want := range map[string][2]string{webhook.Standard: {"Webhook-Id", ""},
		webhook.Stripe: {"", "/id"}, webhook.GitHub: {"X-Github-Delivery", ""}} {
		s, err := ParseScenario("drill.yaml", []byte(webhookScenario("http://127.0.0.1:1", scheme, "whsec_c2VjcmV0")))
		if err != nil || s.Idempotency.Header != want[0] || s.Idempotency.Body != want[1] {
			t.Fatalf("%s: %+v %v", scheme, s, err)
		}
	}
	for name, c := range map[string]struct{ scheme, secret, extra, want string }{
		"scheme":        {"svix", "s", "", `drill.yaml:4: webhook: scheme "svix"`},
		"empty secret":  {"github", "", "", "drill.yaml:4: webhook: the secret is empty"},
		"not base64":    {"standard", "whsec_!!", "", "drill.yaml:4: webhook: "},
		"elsewhere":     {"standard", hookSecret, "idempotency: {header: Idempotency-Key}\n", "drill.yaml:5: idempotency: a standard webhook's key is its header Webhook-Id"},
		"not the id":    {"stripe", "s", "idempotency: {body: /event}\n", "a stripe webhook's key is its body /id"},
		"no key at all": {"github", "s", "idempotency: {none: true}\n", "a github webhook's key"},
	} {
		_, err := ParseScenario("drill.yaml", []byte(webhookScenario("http://127.0.0.1:1", c.scheme, c.secret)+c.extra))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
}
