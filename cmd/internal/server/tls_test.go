package server_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/cmd/internal/server"
	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/ledger"
)

// tlsGateway is a gateway served over TLS on a real socket, its
// certificate issued by ca.
type tlsGateway struct {
	addr  string
	ca    *testenv.CA
	dir   string
	up    *upstream
	store ledger.Store
	s     *server.Server
	clock *testClock // the files are looked at again once it has moved a second on
	logs  *logBuffer
}

// serveTLS serves a gateway whose tls section is section (with {{dir}}
// for the directory of the certificate files, cert.pem and key.pem
// written there), with principals added to agent's.
func serveTLS(t *testing.T, section, principals string) *tlsGateway {
	t.Helper()
	g := &tlsGateway{ca: testenv.NewCA(t, "test CA"), dir: t.TempDir(), up: newUpstream(t), clock: newTestClock(),
		logs: &logBuffer{}}
	cert, key := g.ca.Server(t, "gateway-1")
	testenv.WriteFile(t, g.dir, "cert.pem", cert)
	testenv.WriteFile(t, g.dir, "key.pem", key)
	testenv.WriteFile(t, g.dir, "ca.pem", g.ca.PEM)
	db := dbtest.SQLiteDB(t)
	g.store = db.Open(t)
	text := fmt.Sprintf(`store: %s
upstreams:
  ops: {url: %s}
principals:
  - {name: agent, tenant: acme, roles: [agent], token_sha256: %s}
%s
routes:
  - {match: POST /v1/tickets, upstream: ops}
%s
`, db.DSN, g.up.srv.URL, sha("agent-token"), principals, strings.ReplaceAll(section, "{{dir}}", g.dir))
	cfg := loadConfig(t, g.dir, text)
	cfg.Clock = g.clock.Now
	s, err := server.New(cfg, g.store, slog.New(slog.NewJSONHandler(g.logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	g.s = s
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := s.HTTPServer()
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	g.addr = ln.Addr().String()
	return g
}

// client trusts the gateway's CA and presents certs.
func (g *tlsGateway) client(certs ...tls.Certificate) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
		TLSClientConfig: &tls.Config{RootCAs: g.ca.Pool(), Certificates: certs}}}
}

// post writes a ticket under key as c, with token if set.
func (g *tlsGateway) post(c *http.Client, token, key string) (reply, error) {
	req, _ := http.NewRequest("POST", "https://"+g.addr+"/v1/tickets", strings.NewReader(`{"title":"x"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header, string(b)}, nil
}

// TestClientCertificates: with client_ca, a connection without a client
// certificate, or with one of another CA, fails its handshake; a
// certificate alone authenticates the principal of its subject; a token
// bound to a subject is refused over another certificate. Only the
// accepted requests reach the upstream.
func TestClientCertificates(t *testing.T) {
	t.Parallel()
	g := serveTLS(t, "tls: {cert: {{dir}}/cert.pem, key: {{dir}}/key.pem, client_ca: {{dir}}/ca.pem}", `
  - {name: bot, tenant: acme, roles: [agent], cert_subject: "CN=bot,O=acme"}
  - {name: bound, tenant: acme, roles: [agent], token_sha256: `+sha("bound-token")+`, cert_subject: "CN=bound,O=acme"}`)
	bot := g.ca.ClientPair(t, pkix.Name{CommonName: "bot", Organization: []string{"acme"}})
	bound := g.ca.ClientPair(t, pkix.Name{CommonName: "bound", Organization: []string{"acme"}})
	rogue := testenv.NewCA(t, "rogue CA").ClientPair(t, pkix.Name{CommonName: "bot", Organization: []string{"acme"}})

	if _, err := g.post(g.client(), "agent-token", "no-cert"); err == nil {
		t.Fatal("a connection without a client certificate was served")
	}
	if _, err := g.post(g.client(rogue), "agent-token", "rogue"); err == nil {
		t.Fatal("a client certificate of another CA was accepted")
	}
	checks := []struct {
		name       string
		cert       tls.Certificate
		token, key string
		status     int
		principal  string
	}{
		{"the certificate alone", bot, "", "by-cert", 201, "bot"},
		{"a bound token over its certificate", bound, "bound-token", "bound-ok", 201, "bound"},
		{"a bound token over another certificate", bot, "bound-token", "bound-other", 401, ""},
		{"an unbound token over any certificate", bot, "agent-token", "agent", 201, "agent"},
	}
	for _, c := range checks {
		r, err := g.post(g.client(c.cert), c.token, c.key)
		if err != nil || r.status != c.status {
			t.Fatalf("%s: %+v %v", c.name, r, err)
		}
		op, err := g.store.GetByKey(context.Background(), ledger.OpKey{Tenant: "acme", Namespace: ledger.NamespaceClients,
			Key: c.key})
		if c.principal != "" && (err != nil || op.Principal != c.principal) {
			t.Fatalf("%s: operation %+v, %v", c.name, op, err)
		}
		if c.principal == "" && err == nil {
			t.Fatalf("%s: refused, yet an operation was reserved", c.name)
		}
	}
	if n := g.up.count("/v1/tickets"); n != 3 {
		t.Fatalf("%d effects, want 3", n)
	}
}

// TestCertificateRotation: new handshakes see a certificate written over
// the files, without a restart; a rotation half written (the new
// certificate, the old key) keeps the previous certificate meanwhile.
func TestCertificateRotation(t *testing.T) {
	t.Parallel()
	g := serveTLS(t, "tls: {cert: {{dir}}/cert.pem, key: {{dir}}/key.pem}", "")
	first := g.peer(t)
	if first.Subject.CommonName != "gateway-1" {
		t.Fatalf("served %s", first.Subject)
	}
	cert, key := g.ca.Server(t, "gateway-2")
	testenv.WriteFile(t, g.dir, "cert.pem", cert) // the key is still the old one
	g.clock.Advance(time.Second)                  // past the check's second
	if got := g.peer(t); got.Subject.CommonName != "gateway-1" {
		t.Fatalf("a half-written rotation served %s", got.Subject)
	}
	testenv.WriteFile(t, g.dir, "key.pem", key)
	g.clock.Advance(time.Second)
	if got := g.peer(t); got.Subject.CommonName != "gateway-2" {
		t.Fatalf("the rotated certificate was not served: %s", got.Subject)
	}
	if r, err := g.post(g.client(), "agent-token", "after-rotation"); err != nil || r.status != 201 {
		t.Fatalf("a write after the rotation: %+v %v", r, err)
	}
}

// peer is the certificate a new handshake is served.
func (g *tlsGateway) peer(t *testing.T) *x509.Certificate {
	t.Helper()
	conn, err := tls.Dial("tcp", g.addr, &tls.Config{RootCAs: g.ca.Pool()})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0]
}

// TestTLSConfigErrors: a missing file, a key of another certificate, a
// cert_subject without client_ca: refused at start, at the line.
func TestTLSConfigErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := testenv.NewCA(t, "test CA")
	c1, k1 := ca.Server(t, "a")
	_, k2 := ca.Server(t, "b")
	cert := testenv.WriteFile(t, dir, "c1.pem", c1)
	other := testenv.WriteFile(t, dir, "k2.pem", k2)
	base := "store: sqlite:x.db\nupstreams: {ops: {url: http://127.0.0.1:1}}\nroutes: [{match: POST /a, upstream: ops}]\n"
	withCA := "tls: {cert: " + cert + ", key: " + testenv.WriteFile(t, dir, "k1.pem", k1) + ", client_ca: " + cert + "}\n"
	for _, subject := range []string{"CN=bot,O=acme", "CN=bot,OU=eu+OU=ops,O=acme,C=FR", `CN=a\,b,O=acme`,
		"1.2.3.4=#0c0178,CN=x", "O=acme,CN=bot", "CN=bot,OU=ops,OU=eu", "CN=a,CN=b,O=acme"} {
		text := base + withCA + fmt.Sprintf("principals: [{name: x, tenant: t, cert_subject: %q}]\n", subject)
		if _, err := config.Parse(filepath.Join(dir, "gw.yaml"), []byte(text)); err != nil {
			t.Errorf("%s, as Go writes it: %v", subject, err)
		}
	}
	for _, c := range []struct{ text, want string }{
		{"tls: {cert: " + cert + "}\n", "gw.yaml:4: tls: cert and key are both required"},
		{"tls: {cert: " + cert + ", key: /nonexistent.pem}\n", "gw.yaml:4: tls:"},
		{"tls: {cert: " + cert + ", key: " + other + "}\n", "private key does not match"},
		{"metrics_listen: 127.0.0.1:0\nmetrics_tls: {cert: " + cert + ", key: " + other + "}\n", "gw.yaml:5: tls:"},
		{"metrics_tls: {cert: " + cert + ", key: " + cert + "}\n", "metrics_listen is not set"},
		{"principals: [{name: x, tenant: t, cert_subject: CN=x}]\n", "cert_subject needs tls.client_ca"},
		{"principals: [{name: jwt:x, tenant: t, token_sha256: " + sha("t") + "}]\n", `names beginning with "jwt:"`},
		// A subject spelt otherwise than as RFC 2253 writes a
		// certificate's RDNs would never match: refused, with the form
		// to write.
		{withCA + `principals: [{name: x, tenant: t, cert_subject: "CN=bot, O=acme"}]` + "\n", `write "CN=bot,O=acme"`},
		{withCA + `principals: [{name: x, tenant: t, cert_subject: "cn=bot,o=acme"}]` + "\n", `write "CN=bot,O=acme"`},
		{withCA + `principals: [{name: x, tenant: t, cert_subject: "CN=bot,OU=ops+OU=eu"}]` + "\n", `write "CN=bot,OU=eu+OU=ops"`},
	} {
		_, err := config.Parse(filepath.Join(dir, "gw.yaml"), []byte(base+c.text))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.text, err, c.want)
		}
	}
}

// TestClientCARotationEndsResumedSessions: once client_ca no longer
// holds the CA that issued a client's certificate, that client cannot
// go on by resuming a TLS session (a ticket) it got before: its new
// connections fail, as a full handshake would, and nothing is reserved.
func TestClientCARotationEndsResumedSessions(t *testing.T) {
	t.Parallel()
	g := serveTLS(t, "tls: {cert: {{dir}}/cert.pem, key: {{dir}}/key.pem, client_ca: {{dir}}/ca.pem}", `
  - {name: bot, tenant: acme, roles: [agent], cert_subject: "CN=bot,O=acme"}`)
	bot := g.ca.ClientPair(t, pkix.Name{CommonName: "bot", Organization: []string{"acme"}})
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
		TLSClientConfig: &tls.Config{RootCAs: g.ca.Pool(), Certificates: []tls.Certificate{bot},
			ClientSessionCache: tls.NewLRUClientSessionCache(8)}}}
	var resumed atomic.Bool
	c.Transport.(*http.Transport).TLSClientConfig.VerifyConnection = func(cs tls.ConnectionState) error {
		resumed.Store(cs.DidResume)
		return nil
	}
	for _, key := range []string{"before-1", "before-2"} {
		if r, err := g.post(c, "", key); err != nil || r.status != 201 {
			t.Fatalf("%s: %+v %v", key, r, err)
		}
	}
	if !resumed.Load() {
		t.Fatal("the second connection did not resume the first's session: the test proves nothing")
	}
	// The operator withdraws the CA: client_ca now names another one.
	testenv.WriteFile(t, g.dir, "ca.pem", testenv.NewCA(t, "new client CA").PEM)
	g.clock.Advance(time.Second) // past the check's second
	if r, err := g.post(c, "", "after"); err == nil {
		t.Fatalf("a certificate of the withdrawn CA was served by resuming its session: %+v", r)
	}
	if _, err := g.store.GetByKey(context.Background(), ledger.OpKey{Tenant: "acme", Namespace: ledger.NamespaceClients,
		Key: "after"}); err == nil {
		t.Fatal("refused, yet an operation was reserved")
	}
}

// TestCertificateSubjectIsItsRDNSequence: a certificate is the principal
// whose cert_subject is its subject's exact RDN sequence: one with two
// CNs is not the principal of either CN alone (it was its last CN's), and
// one whose RDNs come in another order is not the principal of the usual
// order (pkix.Name.String wrote both alike). Refused, nothing reserved.
func TestCertificateSubjectIsItsRDNSequence(t *testing.T) {
	t.Parallel()
	g := serveTLS(t, "tls: {cert: {{dir}}/cert.pem, key: {{dir}}/key.pem, client_ca: {{dir}}/ca.pem}", `
  - {name: bot, tenant: acme, roles: [agent], cert_subject: "CN=bot,O=acme"}
  - {name: admin, tenant: acme, roles: [admin], cert_subject: "CN=admin,O=acme"}
  - {name: both, tenant: acme, roles: [agent], cert_subject: "CN=admin,CN=bot,O=acme"}`)
	cn := asn1.ObjectIdentifier{2, 5, 4, 3}
	o := asn1.ObjectIdentifier{2, 5, 4, 10}
	certs := []struct {
		name      string
		subject   pkix.Name
		principal string // "": refused
	}{
		{"the usual order", pkix.Name{Organization: []string{"acme"}, CommonName: "bot"}, "bot"},
		// O=acme, CN=bot, CN=admin: Go's Name keeps the last CN only.
		{"two CNs", pkix.Name{ExtraNames: []pkix.AttributeTypeAndValue{{Type: o, Value: "acme"},
			{Type: cn, Value: "bot"}, {Type: cn, Value: "admin"}}}, "both"},
		// CN=bot, then O=acme: written O=acme,CN=bot.
		{"another order", pkix.Name{ExtraNames: []pkix.AttributeTypeAndValue{{Type: cn, Value: "bot"},
			{Type: o, Value: "acme"}}}, ""},
	}
	for _, c := range certs {
		r, err := g.post(g.client(g.ca.ClientPair(t, c.subject)), "", "key-"+c.name)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		op, gerr := g.store.GetByKey(context.Background(), ledger.OpKey{Tenant: "acme", Namespace: ledger.NamespaceClients, Key: "key-" + c.name})
		switch {
		case c.principal == "" && (r.status != 401 || gerr == nil || !strings.Contains(r.body, `O=acme,CN=bot`)):
			t.Errorf("%s: %d %s, reserved %v: want 401 and nothing reserved", c.name, r.status, r.body, gerr == nil)
		case c.principal != "" && (r.status != 201 || gerr != nil || op.Principal != c.principal):
			t.Errorf("%s: %d %s, operation %+v %v: want the principal %s", c.name, r.status, r.body, op, gerr,
				c.principal)
		}
	}
	if n := g.up.count("/v1/tickets"); n != 2 {
		t.Fatalf("%d effects, want 2", n)
	}
}

// TestTLSRotationIsLoggedAndCounted: a rotation that cannot be used (a
// certificate without its key, a client_ca file with no certificate in
// it) keeps the previous configuration and says so, once, in the log
// and in idemgate_tls_reload_errors_total; a rotation applied is logged
// and counted in idemgate_tls_reloads_total.
func TestTLSRotationIsLoggedAndCounted(t *testing.T) {
	t.Parallel()
	g := serveTLS(t, "tls: {cert: {{dir}}/cert.pem, key: {{dir}}/key.pem, client_ca: {{dir}}/ca.pem}", "")
	agent := g.ca.ClientPair(t, pkix.Name{CommonName: "agent"})
	handshake := func() string {
		conn, err := tls.Dial("tcp", g.addr, &tls.Config{RootCAs: g.ca.Pool(), Certificates: []tls.Certificate{agent}})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].Subject.CommonName
	}
	counts := func() (applied, refused float64) {
		fams, err := g.s.Metrics().Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fams {
			for _, m := range f.Metric {
				if len(m.Label) != 1 || m.Label[0].GetValue() != "tls" {
					continue
				}
				switch f.GetName() {
				case "idemgate_tls_reloads_total":
					applied = m.GetCounter().GetValue()
				case "idemgate_tls_reload_errors_total":
					refused = m.GetCounter().GetValue()
				}
			}
		}
		return applied, refused
	}
	if a, r := counts(); a != 0 || r != 0 {
		t.Fatalf("before any rotation: %v applied, %v refused", a, r)
	}
	cert, key := g.ca.Server(t, "gateway-2")
	testenv.WriteFile(t, g.dir, "cert.pem", cert) // its key not yet written
	for range 3 {                                 // three looks at the same half-written files
		g.clock.Advance(time.Second)
		if cn := handshake(); cn != "gateway-1" {
			t.Fatalf("a half-written rotation served %s", cn)
		}
	}
	if a, r := counts(); a != 0 || r != 1 {
		t.Fatalf("a half-written rotation: %v applied, %v refused, want 0 and 1 (once for the same files)", a, r)
	}
	if n := strings.Count(g.logs.String(), "TLS files not reloaded"); n != 1 ||
		!strings.Contains(g.logs.String(), "private key does not match") {
		t.Fatalf("%d log lines for the half-written rotation:\n%s", n, g.logs.String())
	}
	testenv.WriteFile(t, g.dir, "key.pem", key)
	g.clock.Advance(time.Second)
	if cn := handshake(); cn != "gateway-2" {
		t.Fatalf("the completed rotation: %s", cn)
	}
	if a, r := counts(); a != 1 || r != 1 || !strings.Contains(g.logs.String(), "TLS files reloaded") {
		t.Fatalf("the completed rotation: %v applied, %v refused; log:\n%s", a, r, g.logs.String())
	}
	testenv.WriteFile(t, g.dir, "ca.pem", []byte("not a certificate\n"))
	g.clock.Advance(time.Second)
	if cn := handshake(); cn != "gateway-2" { // the client CAs in hand still verify the agent
		t.Fatalf("a bad client_ca: %s", cn)
	}
	if a, r := counts(); a != 1 || r != 2 || !strings.Contains(g.logs.String(), "no PEM certificate") {
		t.Fatalf("a bad client_ca: %v applied, %v refused; log:\n%s", a, r, g.logs.String())
	}
}
