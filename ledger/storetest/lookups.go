package storetest

import (
	"errors"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/ledger"
)

// unholdable are lookup values no store can hold: a NUL, and bytes that
// are not UTF-8. They come from a caller's URL (/operations/op_x%00).
var unholdable = []string{"op_x\x00", "op_\xff", "\x00"}

// testLookups (issue 24, 7.6): a read by an id, a key or a cursor that no
// store can hold names nothing (not even what it holds up to its NUL,
// where SQLite would stop reading): ErrNotFound where an unknown one is, the
// same empty answer where an unknown one has one, and never a word of the
// driver's (which a caller would otherwise be shown).
func testLookups(t *testing.T, b Backend) {
	s := b.Fresh(t)
	c := ctx(t)
	op, _ := reach(t, s, ledger.Succeeded) // something to list, and to find by mistake
	for _, v := range append(unholdable, op.ID+"\x00", op.Key+"\x00") {
		reads := map[string]func() error{
			"Get": func() error { _, err := s.Get(c, v); return err },
			"GetByKey": func() error {
				_, err := s.GetByKey(c, clientKey("acme", v))
				return err
			},
			"GetApproval": func() error { _, err := s.GetApproval(c, v); return err },
			"GetEffect":   func() error { _, err := s.GetEffect(c, v); return err },
			"List": func() error {
				_, err := s.List(c, ledger.ListParams{Tenant: "acme", After: v})
				return err
			},
			"ListApprovals": func() error {
				_, err := s.ListApprovals(c, ledger.ApprovalListParams{Tenant: "acme", After: v})
				return err
			},
		}
		for name, read := range reads {
			if err := read(); !errors.Is(err, ledger.ErrNotFound) || strings.Contains(err.Error(), "SQLSTATE") {
				t.Errorf("%s(%q): %v, want ErrNotFound and no word of the driver's", name, v, err)
			}
		}
		h, err := s.History(c, v)
		effects, effErr := s.Effects(c, clientKey("acme", v))
		events, evErr := s.AuditEvents(c, ledger.AuditParams{Tenant: "acme", OperationID: v})
		if len(h) != 0 || err != nil || len(effects) != 0 || effErr != nil || len(events) != 0 || evErr != nil {
			t.Errorf("%q: history %v %v, effects %v %v, events %v %v; want none, as for an unknown one",
				v, h, err, effects, effErr, events, evErr)
		}
	}
}
