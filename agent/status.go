package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/idemgate/idemgate/ledger"
)

// Status is what the journal and the gateway know of an intent.
type Status struct {
	Entry     *Entry          `json:"journal"`
	Operation json.RawMessage `json:"operation,omitempty"` // the gateway's view, when it has one
	Problem   string          `json:"gateway_problem,omitempty"`
	unasked   bool            // the gateway could not be asked
	gone      bool            // it no longer holds the operation, or may have purged it
	at        time.Time       // when the gateway was asked, by the client's clock
}

// Status looks the intent's latest version up in the journal and at the
// gateway.
func (c *Client) Status(ctx context.Context, intent string) (Status, error) {
	if err := c.checkRun(); err != nil {
		return Status{}, err
	}
	e, err := c.Journal.Latest(ctx, intent)
	if err != nil {
		return Status{}, err
	}
	return c.statusOf(ctx, e)
}

// StatusByOperation is Status for the intent whose operation id is opID.
func (c *Client) StatusByOperation(ctx context.Context, opID string) (Status, error) {
	if err := c.checkRun(); err != nil {
		return Status{}, err
	}
	e, err := c.Journal.ByOperation(ctx, opID)
	if err != nil {
		return Status{}, err
	}
	return c.statusOf(ctx, e)
}

// statusOf asks the gateway, and reads "it holds nothing" as Do would: the
// retention passed (an operation id was seen, or the last attempt that may
// have reached it is older), or it was never reserved.
func (c *Client) statusOf(ctx context.Context, e *Entry) (Status, error) {
	st := Status{Entry: e, at: c.clock().Now()}
	view, err := c.lookup(ctx, e.Key)
	if err != nil {
		st.unasked, st.Problem = true, "the gateway could not be asked: "+cause(err)
		return st, nil
	}
	last, err := c.Journal.lastSentAttempt(ctx, e.Key)
	if err != nil {
		return st, err
	}
	switch {
	case view.raw != nil:
		st.Operation = view.raw
	case e.OperationID != "":
		st.gone, st.Problem = true, fmt.Sprintf("the gateway no longer holds operation %s: its retention has passed", e.OperationID)
	case !last.IsZero() && time.Since(last) >= c.Policy.withDefaults().GatewayRetention:
		st.gone, st.Problem = true, "the gateway holds nothing under this intent's key, and its last send is older "+
			"than the gateway's retention: it may have been performed and purged"
	default:
		st.Problem = "the gateway has no operation under this intent's key: it was never reserved"
	}
	return st, nil
}

// State is the operation's state as the gateway said when asked; empty
// when it holds none or could not be asked.
func (s Status) State() string {
	var v opView
	_ = json.Unmarshal(s.Operation, &v)
	return string(v.State)
}

// Kind is the intent's outcome as the gateway now sees it, or as the
// journal last recorded it when the gateway cannot tell more ("" for an
// intent never sent).
func (s Status) Kind() Kind {
	var v opView
	_ = json.Unmarshal(s.Operation, &v)
	last := s.Entry.LastKind
	switch v.State {
	case "executing":
		return InProgress
	case "unknown":
		return Unknown
	case "prepared": // not applied (released, or resolved so): resuming is safe
		// Waiting for a human, or its approval lapsed (a resume opens a
		// new one); released, or approved (a resume runs it), is failed
		// for now.
		if ap := v.approval(); v.awaitsApproval(s.at) || ap.Lapsed(s.at) {
			return NeedsApproval
		}
		return Failed
	case "succeeded":
		if last == Created || last == Replayed {
			return last
		}
		return Replayed // an operator's resolution, or a lost answer: a resume replays it
	case "failed":
		if last == Rejected {
			return last
		}
		return Failed
	}
	switch {
	case s.gone && !last.Final():
		return Unknown
	case s.Operation == nil && !s.gone && !s.unasked && last != "" && !last.Final():
		return Failed // never reserved, as a crash left it: not applied, and a resume sends it
	}
	return last
}

// Outcome is the status in an Outcome's terms (the body is the gateway's
// view), so that what a kind asks of the caller is read one way for Do and
// for Status.
func (s Status) Outcome() Outcome {
	e := s.Entry
	o := Outcome{Kind: s.Kind(), Intent: e.Intent, Version: e.Version, Key: e.Key, OperationID: e.OperationID,
		Status: e.LastStatus, Body: s.Operation, Attempts: e.Attempts, Sent: e.Sent, Reason: s.Problem,
		Expired: s.gone}
	var v opView
	if json.Unmarshal(s.Operation, &v) == nil && v.State != "" {
		o.Reason = "the gateway holds it " + string(v.State)
		o.Approval = v.approval()
		switch ap := o.Approval; {
		case v.awaitsApproval(s.at):
			o.Reason += ", waiting for a human's approval: " + ap.waiting()
		case v.State == ledger.Prepared && ap.Lapsed(s.at):
			o.Reason += "; " + ap.lapsedNote()
		case v.State == ledger.Prepared && ap != nil:
			o.Reason += fmt.Sprintf(", and its approval is %s: resuming this intent (the same key) runs it", ap.Status)
		}
	}
	if s.unasked && e.LastKind != "" {
		o.Reason += "; the journal last recorded " + string(e.LastKind)
	}
	// Resuming may change it: the gateway could not say, or holds it not
	// applied (released, or never reserved), so a resume sends it.
	o.Unfinished = s.unasked || (!s.gone && (s.Operation == nil || v.State == "prepared" && !v.awaitsApproval(s.at)))
	return o
}
