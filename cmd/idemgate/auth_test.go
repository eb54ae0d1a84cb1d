package main

import (
	"crypto/tls"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/idp"
	"github.com/idemgate/idemgate/internal/testenv"
)

// TestCallAndMCPPassAJWT: idemgate call and idemgate mcp (stdio) send a
// JWT of the gateway's auth.jwt issuer as they send any token: writes
// are performed once and replayed, under the token's tenant.
func TestCallAndMCPPassAJWT(t *testing.T) {
	t.Parallel()
	p, err := idp.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	f := newAgentFixtureWith(t, fmt.Sprintf("auth: {jwt: {issuer: %q, audience: idemgate, jwks_url: %q, "+
		"tenant_claim: tenant}}\n", p.Issuer, p.JWKSURL))
	jwt, err := p.Sign("k1", map[string]any{"iss": p.Issuer, "aud": "idemgate", "sub": "agent-7", "tenant": "acme",
		"exp": time.Now().Add(time.Hour).Unix()})
	if err != nil {
		t.Fatal(err)
	}
	token := "IDEMGATE_TOKEN=" + jwt
	for _, want := range []string{"created", "replayed"} {
		if r, out := f.callTicket(t, "jwt/create-ticket", token); r.code != 0 || out["kind"] != want {
			t.Fatalf("call, want %s: %+v", want, r)
		}
	}
	if r, _ := f.callTicket(t, "jwt/refused", "IDEMGATE_TOKEN="+idp.Unsigned(map[string]any{"iss": p.Issuer,
		"aud": "idemgate", "sub": "x", "tenant": "acme", "exp": time.Now().Add(time.Hour).Unix()})); r.code == 0 {
		t.Fatalf("call with an unsigned token: %+v", r)
	}
	cs := f.mcp(t, token)
	write := map[string]any{"method": "POST", "path": "/v1/tickets", "body": map[string]any{"title": "by MCP"}}
	intent := handOut(t, cs, write)
	for _, want := range []string{"created", "replayed"} {
		if r := callTool(t, cs, "submit_write", withIntent(write, intent)); r.isError || r.out["kind"] != want {
			t.Fatalf("mcp, want %s: %+v", want, r)
		}
	}
	if n := f.effects.Load(); n != 2 {
		t.Fatalf("%d effects, want 2", n)
	}
}

// TestServeOverTLS: serve with tls and client_ca serves the listener and
// the metrics listener over TLS, to clients with a certificate of
// client_ca only.
func TestServeOverTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := testenv.NewCA(t, "test CA")
	cert, key := ca.Server(t, "gateway")
	tlsSection := fmt.Sprintf("tls: {cert: %s, key: %s, client_ca: %s}\nmetrics_listen: 127.0.0.1:0\n",
		testenv.WriteFile(t, dir, "cert.pem", cert), testenv.WriteFile(t, dir, "key.pem", key),
		testenv.WriteFile(t, dir, "ca.pem", ca.PEM))
	up := newSlowUpstream(t, 0)
	gw := startGateway(t, writeConfig(t, "sqlite:"+filepath.Join(dir, "gw.db"), up.srv.URL, tlsSection))
	base := strings.Replace(gw.URL, "http://", "https://", 1)
	client := func(certs ...tls.Certificate) *http.Client {
		return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), Certificates: certs}}}
	}
	agent := client(ca.ClientPair(t, pkix.Name{CommonName: "agent-host"}))
	req, _ := http.NewRequest("POST", base+"/v1/writes", strings.NewReader(`{"n":1}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer agent-token")
	req.Header.Set("Idempotency-Key", "over-tls")
	resp, err := agent.Do(req)
	if err != nil || resp.StatusCode != 201 {
		t.Fatalf("a write over TLS: %v %v", resp, err)
	}
	resp.Body.Close()
	if _, err := client().Get(base + "/healthz"); err == nil {
		t.Fatal("served a client without a certificate")
	}
	if resp, err := http.Get(gw.URL + "/healthz"); err == nil && resp.StatusCode == 200 {
		t.Fatal("served plain HTTP")
	}
	metrics := "https://" + metricsAddr(t, gw) + "/metrics"
	if _, err := client().Get(metrics); err == nil {
		t.Fatal("metrics served to a client without a certificate")
	}
	resp, err = agent.Get(metrics)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("metrics over TLS: %v %v", resp, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "idemgate_") || up.effects.Load() != 1 {
		t.Fatalf("metrics %.200s, %d effects", body, up.effects.Load())
	}
}

// metricsAddr is the address the process logged it serves metrics on.
func metricsAddr(t *testing.T, p *testenv.Process) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, line := range p.Logs() {
			var l struct{ Msg, Addr string }
			if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "serving metrics" {
				return l.Addr
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("no metrics listener logged")
	return ""
}
