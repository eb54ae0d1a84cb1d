package webui_test

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/ledger"
)

// reserve makes an operation of acme on route through the store, executing
// with lease.
func (fx *fixture) reserve(key, route string, lease time.Duration) ledger.Reservation {
	fx.t.Helper()
	r, err := fx.store.Reserve(context.Background(), ledger.ReserveParams{Namespace: ledger.NamespaceClients, Kind: ledger.KindRoute,
		Tenant: "acme", Key: key, Route: route,
		Target: "POST " + route, Fingerprint: "sha256:" + strings.Repeat("ab", 32), Lease: lease, Retention: time.Hour,
		Actor: "test", Principal: "bot"})
	if err != nil {
		fx.t.Fatal(err)
	}
	return r
}

var opLink = regexp.MustCompile(`href="/ui/operations/(op_[0-9A-Z]+)"`)

// listed returns the operations a page of the explorer links to.
func listed(r reply) []string {
	var ids []string
	for _, m := range opLink.FindAllStringSubmatch(r.body, -1) {
		ids = append(ids, m[1])
	}
	return ids
}

// TestExplorer: the explorer filters by state, route, age and "stuck",
// marks what is stuck (executing past its lease, unknown), and pages.
func TestExplorer(t *testing.T) {
	t.Parallel()
	fx := newFixture(t)
	c := context.Background()
	done := fx.reserve("done", "/v1/tickets", time.Hour)
	if _, err := fx.store.Complete(c, *done.Lease, ledger.Outcome{State: ledger.Succeeded,
		Response: &ledger.Response{Status: 201}}); err != nil {
		t.Fatal(err)
	}
	lapsed := fx.reserve("lapsed", "/v1/tickets", time.Millisecond)
	lost := fx.reserve("lost", "/v1/payments", time.Hour)
	if _, err := fx.store.MarkUnknown(c, *lost.Lease, ledger.Note{Reason: "timeout"}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond) // the short lease lapses
	alice := fx.signIn(t, "alice")
	for query, want := range map[string][]string{
		"":                          {done.Op.ID, lapsed.Op.ID, lost.Op.ID},
		"state=unknown":             {lost.Op.ID},
		"route=/v1/tickets":         {done.Op.ID, lapsed.Op.ID},
		"stuck=1":                   {lapsed.Op.ID, lost.Op.ID},
		"age=15m":                   {done.Op.ID, lapsed.Op.ID, lost.Op.ID},
		"age=over1h":                nil,
		"state=succeeded&stuck=1":   nil,
		"route=/v1/payments&age=1h": {lost.Op.ID},
	} {
		r := alice.get("/ui/operations?" + query)
		if got := listed(r); r.status != http.StatusOK || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("?%s: %d %v, want %v", query, r.status, got, want)
		}
	}
	page := alice.get("/ui/operations?stuck=1")
	if !strings.Contains(page.body, "executing past its lease") || !strings.Contains(page.body, "outcome unknown") {
		t.Error("the stuck operations are not marked")
	}
	// The control API's status for the same refusal: one error map.
	if r := alice.get("/ui/operations?state=lost"); r.status != http.StatusUnprocessableEntity {
		t.Errorf("an unknown state: %d", r.status)
	}

	for i := range 60 {
		fx.reserve(fmt.Sprintf("many-%d", i), "/v1/many", time.Hour)
	}
	first := alice.get("/ui/operations?route=/v1/many")
	next := regexp.MustCompile(`href="/ui/operations\?([^"]+)" id="next-page"`).FindStringSubmatch(first.body)
	if len(listed(first)) != 50 || next == nil {
		t.Fatalf("first page: %d operations, next %v", len(listed(first)), next)
	}
	second := alice.get("/ui/operations?" + strings.ReplaceAll(next[1], "&amp;", "&"))
	if len(listed(second)) != 10 || strings.Contains(second.body, `id="next-page"`) {
		t.Fatalf("second page: %d operations (want 10), and a next page: %t", len(listed(second)),
			strings.Contains(second.body, `id="next-page"`))
	}
}

// TestDashboardWithoutHistory: with no metrics history the dashboard
// says so rather than drawing empty charts.
func TestDashboardWithoutHistory(t *testing.T) {
	t.Parallel()
	fx := newFixture(t)
	r := fx.signIn(t, "bot").get("/ui/dashboard")
	if r.status != http.StatusOK || !strings.Contains(r.body, "No data yet") {
		t.Fatalf("dashboard without a history: %d %s", r.status, r.body)
	}
}

// TestOperationEffects: an operation's page lists its effects in their
// order, with their state and attempts; a name or error is text, never
// markup; an operation without effects shows no such section.
func TestOperationEffects(t *testing.T) {
	t.Parallel()
	fx := newFixture(t)
	c := context.Background()
	r := fx.reserve("dossier_42:v5", "/v1/dossiers", time.Hour)
	plain := fx.reserve("plain", "/v1/tickets", time.Hour)
	if _, err := fx.store.Enqueue(c, []ledger.EffectParams{
		{Tenant: "acme", OperationKey: "dossier_42:v5", Name: "make-pdf", Target: "docs", Path: "/v1/pdfs"},
		{Tenant: "acme", OperationKey: "dossier_42:v5", Name: "send-link", Target: "<b>mail</b>", Path: "/v1/mail"},
	}); err != nil {
		t.Fatal(err)
	}
	alice := fx.signIn(t, "alice")
	page := alice.get("/ui/operations/" + r.Op.ID)
	first, second := strings.Index(page.body, "make-pdf"), strings.Index(page.body, "send-link")
	if page.status != http.StatusOK || first < 0 || second < first || !strings.Contains(page.body, `id="effects"`) ||
		strings.Contains(page.body, "<b>mail</b>") || !strings.Contains(page.body, "&lt;b&gt;mail&lt;/b&gt;") {
		t.Fatalf("effects on the page: %d\n%s", page.status, page.body)
	}
	if other := alice.get("/ui/operations/" + plain.Op.ID); strings.Contains(other.body, `id="effects"`) {
		t.Fatal("an operation without effects shows an effects section")
	}
}
