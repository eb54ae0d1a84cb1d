package config

import (
	"strings"
	"testing"
	"time"
)

// webhookConfig is a configuration whose last route (line 7) is a
// webhook route with the settings given, each key on its own line.
func webhookConfig(route, settings string) string {
	return `store: sqlite:/tmp/x.db
upstreams:
  ops: {url: "http://127.0.0.1:9090"}
routes:
  - match: POST /v1/tickets
    upstream: ops
  - ` + route + `
    webhook:
` + settings
}

// TestWebhookConfig: a webhook route defaults to a week's retention and
// the key of its scheme; every mistake, an empty secret first, is refused
// at start-up naming its file and line.
func TestWebhookConfig(t *testing.T) {
	t.Setenv("IDEMGATE_TEST_HOOK_SECRET", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	t.Setenv("IDEMGATE_TEST_EMPTY_SECRET", "")
	const route = "match: POST /hooks/in\n    upstream: ops"
	const std = "      scheme: standard\n      secret: ${IDEMGATE_TEST_HOOK_SECRET}\n      tenant: acme\n"
	cfg, err := Parse("gw.yaml", []byte(webhookConfig(route, std)))
	if err != nil {
		t.Fatal(err)
	}
	r := cfg.Routes[1]
	if r.Retention != 7*24*time.Hour || r.Webhook.verifier == nil || r.Webhook.verifier.KeyFrom() != "header:Webhook-Id" {
		t.Fatalf("route %+v", r)
	}
	if strings.Contains(r.Webhook.Secret.String(), "whsec") {
		t.Fatal("the secret shows in the setting's String")
	}
	for name, c := range map[string]struct{ route, settings, want string }{
		"empty secret": {route, "      scheme: github\n      secret: \"\"\n      tenant: acme\n", "gw.yaml:11: route POST /hooks/in: webhook: secret 1 is empty"},
		"empty variable": {route, "      scheme: stripe\n      secret: ${IDEMGATE_TEST_EMPTY_SECRET}\n      tenant: acme\n",
			"gw.yaml:11: route POST /hooks/in: webhook: secret 1 is empty"},
		"one empty of two": {route, "      scheme: stripe\n      secret: [whsec_a, \"\"]\n      tenant: acme\n", "gw.yaml:11: route POST /hooks/in: webhook: secret 2 is empty"},
		"no secret":        {route, "      scheme: stripe\n      tenant: acme\n", "gw.yaml:7: route POST /hooks/in: webhook: no secret"},
		"not base64":       {route, "      scheme: standard\n      secret: whsec_!!\n      tenant: acme\n", "gw.yaml:11: route POST /hooks/in: webhook: secret 1: want whsec_ and base64"},
		"unknown scheme":   {route, "      scheme: svix\n      secret: s\n      tenant: acme\n", "gw.yaml:10: route POST /hooks/in: webhook: scheme \"svix\""},
		"no tenant":        {route, "      scheme: github\n      secret: s\n", "gw.yaml:7: route POST /hooks/in: webhook: tenant"},
		"short retention":  {route + "\n    retention: 24h", std, "gw.yaml:7: route POST /hooks/in: retention 24h0m0s: a webhook route keeps its keys at least 72h0m0s"},
		"github tolerance": {route, "      scheme: github\n      secret: s\n      tenant: acme\n      tolerance: 5m\n", "gw.yaml:13: route POST /hooks/in: webhook: tolerance"},
		"a GET":            {"match: GET /hooks/in\n    upstream: ops", std, "a webhook route is a POST"},
		"key_from":         {route + "\n    key_from: header:X-Id", std, "key_from: the scheme names the key"},
		"roles":            {route + "\n    roles: [agent]", std, "roles: a webhook route is authenticated by its signature"},
		"github business":  {route + "\n    business_key: /id", "      scheme: github\n      secret: s\n      tenant: acme\n", "business key is its body's digest"},
	} {
		_, err := Parse("gw.yaml", []byte(webhookConfig(c.route, c.settings)))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "whsec_a") {
			t.Errorf("%s: the error shows a secret: %v", name, err)
		}
	}
	short := webhookConfig(route+"\n    retention: 1h", std+"      allow_short_retention: true\n")
	if cfg, err := Parse("gw.yaml", []byte(short)); err != nil || cfg.Routes[1].Retention != time.Hour {
		t.Fatalf("allow_short_retention: %v", err)
	}
}
