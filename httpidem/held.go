package httpidem

import (
	"fmt"
	"strings"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/ledger"
)

// Admission is what a new operation will hold in the store, as Admit
// hears it before the reservation.
type Admission struct {
	// Bytes estimates what the operation (and its approval) will hold:
	// ledger.OperationHeld and ledger.ApprovalHeld, as the stores' Usage
	// count them once it is there.
	Bytes int64
	// Approval says it opens an approval, pending until someone decides.
	Approval bool
}

// admission is what req's operation, opening apr if set, will hold.
func (req *request) admission(apr *ledger.ApprovalRequest) Admission {
	context := len(req.key) + len(req.route.name) + len(req.target) + len(req.fingerprint) + len(req.who) +
		len(req.run) + len(req.trace)
	// Its probe, rendered at the reservation, is counted from the store's
	// next figure: rendering it twice would cost every request.
	own := len(req.businessKey()) + len(pointerValue(req.command, req.route.concurrent))
	if apr == nil {
		return Admission{Bytes: ledger.OperationHeld(int64(context), int64(own), 1)}
	}
	texts := len(req.key) + len(req.route.name) + len(apr.Target) + len(req.fingerprint) + len(apr.Summary) +
		len(apr.Command) + len(apr.RequestedBy) + len(strings.Join(apr.Approvers, ","))
	return Admission{Bytes: ledger.OperationHeld(int64(context), int64(own), 0) + ledger.ApprovalHeld(int64(texts)),
		Approval: true}
}

// targetBound refuses a keyed request whose target is longer than
// MaxTarget: the target is kept on its operation and copied into each of
// its audit events.
func (m *Middleware) targetBound(req *request) *contract.Problem {
	if len(req.target) <= m.opts.MaxTarget {
		return nil
	}
	return contract.NewProblem(contract.CodePayloadTooLarge, fmt.Sprintf("the request's method and path are %d "+
		"bytes, over the %d this gateway records; nothing was reserved", len(req.target), m.opts.MaxTarget))
}

// commandBound refuses an approval whose command is longer than
// MaxApprovalCommand: it is kept with the approval, and a person has to
// read it to decide.
func (m *Middleware) commandBound(apr *ledger.ApprovalRequest) *contract.Problem {
	if apr == nil || len(apr.Command) <= m.opts.MaxApprovalCommand {
		return nil
	}
	return contract.NewProblem(contract.CodePayloadTooLarge, fmt.Sprintf("this request needs an approval, and "+
		"its command is %d bytes, over the %d an approval shows; nothing was reserved", len(apr.Command),
		m.opts.MaxApprovalCommand))
}
