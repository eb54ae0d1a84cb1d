package config

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/idemgate/idemgate/inbox/webhook"
)

// The retention of a webhook route's keys (docs/design.md, "Inbox:
// messages and webhooks"): senders retry for days (Standard Webhooks'
// example schedule reaches about 75 hours), so a key must outlive their
// retries, or a late retry is a second effect.
const (
	WebhookRetention         = 7 * 24 * time.Hour
	WebhookShortestRetention = 3 * 24 * time.Hour
)

// Webhook is a route's webhook setting: the route is authenticated
// by its sender's signature, checked before anything is reserved, and its
// operations belong to Tenant.
//
//	webhook: {scheme: stripe, secret: "${STRIPE_WEBHOOK_SECRET}", tenant: acme, tolerance: 5m}
//	webhook: {scheme: standard, secret: ["${HOOK_SECRET}", "${HOOK_SECRET_OLD}"], tenant: acme}
type Webhook struct {
	Scheme string `yaml:"scheme"`
	// Secret is the sender's signing secret, or a list of them while one
	// is rotated: a delivery signed with any of them is accepted.
	Secret Secrets `yaml:"secret"`
	Tenant string  `yaml:"tenant"`
	// Tolerance bounds how far a signed timestamp may be from now (5m);
	// GitHub signs none.
	Tolerance time.Duration `yaml:"tolerance"`
	// AllowShortRetention lets the route's retention be under three days.
	AllowShortRetention bool `yaml:"allow_short_retention"`

	verifier *webhook.Verifier
}

// Secrets is one secret or a list of them. Its String never shows them.
type Secrets []string

// UnmarshalYAML reads a scalar or a sequence of scalars.
func (s *Secrets) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		*s = Secrets{n.Value}
		return nil
	}
	var list []string
	if err := n.Decode(&list); err != nil {
		return fmt.Errorf("line %d: secret: want a string or a list of strings", n.Line)
	}
	*s = list
	return nil
}

// String hides the secrets: a configuration printed or logged shows how
// many there are, never what.
func (s Secrets) String() string { return fmt.Sprintf("[%d secret(s)]", len(s)) }

// checkWebhook checks a route's webhook setting, builds its verifier, and
// sets the route's retention; every refusal names its line.
func (c *Config) checkWebhook(r *Route) error {
	w := r.Webhook
	if w == nil {
		return nil
	}
	at := func(key string) int {
		if l := r.webhookLines[key]; l > 0 {
			return l
		}
		return r.line
	}
	if !slices.Contains(webhook.Schemes(), w.Scheme) {
		return c.errorf(at("scheme"), "route %s: webhook: scheme %q: want one of %s", r.Match, w.Scheme,
			strings.Join(webhook.Schemes(), ", "))
	}
	if msg := webhookMisfit(r); msg != "" {
		return c.errorf(r.line, "route %s: webhook: %s", r.Match, msg)
	}
	if w.Tenant == "" || strings.Contains(w.Tenant, ":") {
		return c.errorf(at("tenant"), "route %s: webhook: tenant: want the tenant its operations belong to (no ':')", r.Match)
	}
	if w.Tolerance < 0 || (w.Tolerance > 0 && w.Scheme == webhook.GitHub) {
		return c.errorf(at("tolerance"), "route %s: webhook: tolerance: a positive duration, and github signs no timestamp", r.Match)
	}
	if err := c.webhookRetention(r); err != nil {
		return err
	}
	v, err := webhook.New(webhook.Options{Scheme: w.Scheme, Secrets: w.Secret, Tolerance: w.Tolerance})
	if err != nil { // the scheme is known: the secrets are wrong
		return c.errorf(at("secret"), "route %s: webhook: %v", r.Match, err)
	}
	w.verifier = v
	if len(r.Outcomes.NotApplied) == 0 && len(r.Outcomes.Final) == 0 {
		r.Outcomes.NotApplied = WebhookNotApplied
	}
	return nil
}

// WebhookNotApplied are a webhook route's not_applied statuses when its
// outcomes name none: 502 and 503, what a receiver's own proxy or a
// receiver not taking work answers before the event reaches it. Senders
// retry for days; an event that is unknown answers every retry 409 until
// someone resolves it, so a route says what its receiver means by the
// rest (a 500 or a 504 may come after the receiver acted: unknown, unless
// the route lists them).
var WebhookNotApplied = []int{502, 503}

// webhookMisfit says what of the route cannot go with a webhook: the
// scheme names the key, the signature is the only credential (no roles,
// which a bearer token would bring), and senders POST.
func webhookMisfit(r *Route) string {
	switch {
	case r.method != http.MethodPost:
		return "a webhook route is a POST"
	case r.KeyFrom != "":
		return "key_from: the scheme names the key (signed material), it cannot be chosen"
	case r.RequireKey != nil && !*r.RequireKey:
		return "require_key: a webhook always has its key"
	case len(r.Roles) > 0:
		return "roles: a webhook route is authenticated by its signature, and has no roles"
	case r.Webhook.Scheme == webhook.GitHub && r.BusinessKey != "":
		return "business_key: a github route's business key is its body's digest"
	}
	return ""
}

// webhookRetention defaults a webhook route's retention to a week, and
// refuses one under three days unless allow_short_retention says so.
func (c *Config) webhookRetention(r *Route) error {
	switch {
	case r.Retention == 0:
		r.Retention = WebhookRetention
	case r.Retention < WebhookShortestRetention && !r.Webhook.AllowShortRetention:
		return c.errorf(r.line, "route %s: retention %v: a webhook route keeps its keys at least %v (senders retry for "+
			"days; a key forgotten sooner lets a late retry make a second effect); set webhook: {allow_short_retention: true} "+
			"to accept that", r.Match, r.Retention, WebhookShortestRetention)
	}
	return nil
}

// Verifier is the route's sender's signature check, built at start-up.
func (w *Webhook) Verifier() *webhook.Verifier { return w.verifier }
