package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/internal/idp"
	"github.com/idemgate/idemgate/limits"
)

// BenchmarkAuthenticate is what authenticating one request costs: a
// static token, and a JWT after its first verification (cached), side
// by side (issue 23: a JWT within 5% of a static token, end to end).
func BenchmarkAuthenticate(b *testing.B) {
	p, err := idp.Start()
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	text := benchConfig + fmt.Sprintf("auth: {jwt: {issuer: %q, audience: idemgate, jwks_url: %q, tenant_claim: org}}\n",
		p.Issuer, p.JWKSURL)
	b.Setenv("IDEMGATE_TEST_OPS_TOKEN", "s3cret")
	cfg, err := config.Parse("gw.yaml", []byte(text))
	if err != nil {
		b.Fatal(err)
	}
	g := &Gateway{cfg: cfg, log: slog.New(slog.DiscardHandler), limits: limits.New(limits.Options{}),
		jwt: newJWTAuth(cfg.Auth.JWT, slog.New(slog.DiscardHandler))}
	jwt, _ := p.Sign("k1", map[string]any{"iss": p.Issuer, "aud": "idemgate", "sub": "a", "org": "acme",
		"exp": time.Now().Add(time.Hour).Unix()})
	for name, token := range map[string]string{"static": "test", "jwt": jwt} {
		b.Run(name, func(b *testing.B) {
			r := httptest.NewRequest("POST", "/v1/tickets", nil).WithContext(context.Background())
			r.Header.Set("Authorization", "Bearer "+token)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if p, prob := g.authenticate(r); p == nil {
						b.Fatal(prob)
					}
				}
			})
		})
	}
}

// benchConfig is a configuration with one static principal (token
// "test") and one route.
const benchConfig = `listen: 127.0.0.1:0
store: sqlite:/tmp/x.db
upstreams:
  ops: {url: http://127.0.0.1:9090}
principals:
  - {name: support-agent, tenant: acme, roles: [agent], token_sha256: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"}
routes:
  - {match: POST /v1/tickets, upstream: ops}
`
