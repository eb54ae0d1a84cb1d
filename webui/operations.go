package webui

import (
	"html/template"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/ledger"
)

// The explorer reads the tenant's operations in id order, which is
// creation order (ids are ULIDs), through the store's List. The store
// filters by tenant and state; route, age and "stuck" are filtered here,
// over a bounded number of rows per page, so that a page never reads the
// whole store: past the bound, the page says so and offers to go on.
const (
	listPage = 50   // operations shown on a page
	scanRows = 2000 // rows read at most to fill one
)

// ages are the explorer's age filters: created within, or before, a span
// back from now.
var ages = []ageFilter{
	{"", "any age", 0, false},
	{"15m", "last 15 minutes", 15 * time.Minute, false},
	{"1h", "last hour", time.Hour, false},
	{"24h", "last 24 hours", 24 * time.Hour, false},
	{"over1h", "older than an hour", time.Hour, true},
	{"over24h", "older than a day", 24 * time.Hour, true},
}

type ageFilter struct {
	Value, Label string
	Span         time.Duration
	Older        bool
}

// filter is what the explorer's form asks for.
type filter struct {
	State ledger.State
	Route string
	Age   ageFilter
	Stuck bool
	After string
}

// readFilter reads the explorer's query; a value it does not know is
// refused by name rather than ignored.
func readFilter(r *http.Request) (filter, string) {
	q := r.URL.Query()
	f := filter{Route: strings.TrimSpace(q.Get("route")), Stuck: q.Get("stuck") == "1", After: q.Get("after")}
	if s := q.Get("state"); s != "" {
		st, err := ledger.ParseState(s)
		if err != nil {
			return f, "Unknown state " + s + "."
		}
		f.State = st
	}
	for _, a := range ages {
		if a.Value == q.Get("age") {
			f.Age = a
			return f, ""
		}
	}
	return f, "Unknown age filter."
}

// query is the explorer's query for these filters from cursor after,
// encoded here (and so safe to put in a link as it is).
func (f filter) query(after string) template.URL {
	q := url.Values{}
	for name, v := range map[string]string{"state": string(f.State), "route": f.Route, "age": f.Age.Value, "after": after} {
		if v != "" {
			q.Set(name, v)
		}
	}
	if f.Stuck {
		q.Set("stuck", "1")
	}
	return template.URL(q.Encode()) // #nosec: url.Values.Encode escapes every value
}

// row is one operation in the explorer.
type row struct {
	Op    *ledger.Operation
	Stuck string // why it needs a person, or ""
}

// operationsData is a page of the explorer.
type operationsData struct {
	Filter filter
	States []ledger.State
	Ages   []ageFilter
	Rows   []row
	Next   string // the cursor of the next page, or ""
	// NextQuery is the next page's query: the same filters, from Next.
	NextQuery template.URL
	Scanned   int  // rows read for this page
	Partial   bool // the scan stopped at its bound before the page was full
}

// operations is the explorer.
func (u *UI) operations(w http.ResponseWriter, r *http.Request, s *session) {
	f, bad := readFilter(r)
	if bad != "" { // the control API's status for a bad filter: one error map
		u.storeFail(w, r, s, contract.NewProblem(contract.CodeInvalidCommand, bad), "operations")
		return
	}
	data, err := u.scan(r, s.principal.Tenant, f)
	if err != nil {
		u.storeFail(w, r, s, err, "operations")
		return
	}
	if data.Next != "" {
		data.NextQuery = f.query(data.Next)
	}
	u.render(w, r, http.StatusOK, "operations", u.page(s, "operations", "Operations", data))
}

// scan fills a page of the explorer from the store's pages.
func (u *UI) scan(r *http.Request, tenant string, f filter) (operationsData, error) {
	now := u.opts.Now()
	data := operationsData{Filter: f, States: ledger.States, Ages: ages}
	p := ledger.ListParams{Tenant: tenant, State: f.State, After: f.After, Limit: 200}
	if f.Age.Span > 0 && !f.Age.Older {
		p.After = max(p.After, idFloor(now.Add(-f.Age.Span)))
	}
	for {
		pg, err := u.opts.Store.List(r.Context(), p)
		if err != nil {
			return data, err
		}
		for _, op := range pg.Operations {
			if f.Age.Older && op.CreatedAt.After(now.Add(-f.Age.Span)) {
				return data, nil // in id order, every later one is younger still
			}
			data.Scanned++
			p.After = op.ID
			if rw := u.rowOf(op, now); f.keeps(rw) {
				data.Rows = append(data.Rows, rw)
			}
			if len(data.Rows) == listPage || data.Scanned == scanRows {
				data.Partial = len(data.Rows) < listPage
				data.Next = op.ID
				return data, nil
			}
		}
		if pg.Next == "" {
			return data, nil
		}
	}
}

// keeps reports whether the row passes the filters the store does not
// apply.
func (f filter) keeps(rw row) bool {
	return (f.Route == "" || rw.Op.Route == f.Route) && (!f.Stuck || rw.Stuck != "")
}

// idFloor is the smallest operation id created at t or later: ids are
// "op_" and a ULID, whose text sorts by its time, so the store's cursor
// skips straight to the operations younger than t.
func idFloor(t time.Time) string {
	var id ulid.ULID
	if err := id.SetTime(ulid.Timestamp(t)); err != nil {
		return ""
	}
	return "op_" + id.String()
}

// rowOf marks what is stuck: what will not move again without a person.
func (u *UI) rowOf(op *ledger.Operation, now time.Time) row {
	rw := row{Op: op}
	switch {
	case op.State == ledger.Executing && now.After(op.LeaseUntil):
		rw.Stuck = "executing past its lease (lapsed " + ago(now.Sub(op.LeaseUntil)) + "): it becomes unknown"
	case op.State == ledger.Unknown:
		rw.Stuck = "outcome unknown: to reconcile"
	case op.State == ledger.Prepared && op.Approval != nil && op.Approval.Status == ledger.ApprovalPending:
		left := op.Approval.ExpiresAt.Sub(now)
		if left < u.opts.NearExpiry {
			rw.Stuck = "approval pending, " + remaining(left)
		}
	}
	return rw
}
