package natsinbox

import "testing"

// matches reads a consumer's filter subject as JetStream does.
func TestMatches(t *testing.T) {
	for _, c := range []struct {
		filter, subject string
		want            bool
	}{
		{"", "billing.dead", true},
		{"billing.>", "billing.dead", true},
		{"billing.>", "billing", false},
		{"billing.*", "billing.dead", true},
		{"billing.*", "billing.dead.x", false},
		{"billing.*.in", "billing.eu.in", true},
		{"billing.in", "billing.dead", false},
		{"billing.in", "billing.in", true},
		{"dead.billing", "billing.dead", false},
		{">", "dead", true},
		{"billing.events.>", "billing.dead", false},
	} {
		if got := matches(c.filter, c.subject); got != c.want {
			t.Errorf("matches(%q, %q) = %v, want %v", c.filter, c.subject, got, c.want)
		}
	}
}
