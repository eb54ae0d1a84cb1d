// Package control is idemgate's control plane (docs/design.md, "The web
// page" and "Layout"): the JSON API under /_idem/v1 (operations,
// approvals, audit, effects), and the operator actions written once
// (Operator: Decide, Resolve, ResolveEffect) that the JSON API, the web
// page and the CLI all call. Its typed client is control/client, which
// links none of this.
//
// Everything is scoped to the caller's tenant: another tenant's record is
// 404, never 403, so that its existence is not revealed. Every refusal is
// contract.ProblemFor's, the one error→status map.
package control

import (
	"context"
	"errors"
	"log/slog"
	"net/http"

	"github.com/idemgate/idemgate/approval"
	"github.com/idemgate/idemgate/contract"
)

// Options configure the JSON API. Operator and Caller are required.
type Options struct {
	// Operator makes the operator actions and reads through its Store.
	Operator *Operator
	// Caller names the authenticated principal of a request (the
	// gateway's bearer authentication finds it); false answers 401.
	Caller func(r *http.Request) (approval.Principal, bool)
	// Prefix is where the API is mounted (default contract.ControlPrefix).
	Prefix string
	// Logger hears what an answer cannot carry (an export cut midway).
	Logger *slog.Logger
	// Reload, if set, re-reads the server's configuration for an admin's
	// POST /config/reload (contract.ReloadPath); nil answers 404.
	Reload func(ctx context.Context) error
}

// API is the control API's handler.
type API struct {
	opts Options
	op   *Operator
	mux  *http.ServeMux
}

// New checks opts and builds the API's handler, to be mounted at
// opts.Prefix behind the caller's authentication.
func New(opts Options) (*API, error) {
	if opts.Operator == nil || opts.Operator.Store == nil || opts.Caller == nil {
		return nil, errors.New("control: Operator (with its Store) and Caller are required")
	}
	if opts.Prefix == "" {
		opts.Prefix = contract.ControlPrefix
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	a := &API{opts: opts, op: opts.Operator, mux: http.NewServeMux()}
	a.routes()
	return a, nil
}

// routes registers every resource; anything else under the prefix is 404.
func (a *API) routes() {
	p, mux := a.opts.Prefix, a.mux
	mux.HandleFunc("GET "+p+"/operations/{id}", a.caller(a.getOperation))
	mux.HandleFunc("GET "+p+"/operations", a.caller(a.listOperations))
	mux.HandleFunc("POST "+p+"/operations/{id}/resolve", a.caller(a.resolve))
	for _, step := range []string{contract.StepComplete, contract.StepHeartbeat, contract.StepRelease, contract.StepUnknown} {
		mux.HandleFunc("POST "+p+"/operations/{id}/"+step, a.caller(a.step(step)))
	}
	mux.HandleFunc("GET "+p+"/approvals", a.caller(a.listApprovals))
	mux.HandleFunc("GET "+p+"/approvals/{id}", a.caller(a.getApproval))
	mux.HandleFunc("POST "+p+"/approvals/{id}/approve", a.caller(a.decide(true)))
	mux.HandleFunc("POST "+p+"/approvals/{id}/deny", a.caller(a.decide(false)))
	mux.HandleFunc("GET "+p+"/audit/checkpoint", a.caller(a.auditCheckpoint))
	mux.HandleFunc("GET "+p+"/audit/export", a.caller(a.auditExport))
	mux.HandleFunc("POST "+p+"/effects/{id}/resolve", a.caller(a.resolveEffect))
	mux.HandleFunc("POST "+p+"/config/reload", a.caller(a.reload))
	mux.HandleFunc(p+"/", func(w http.ResponseWriter, r *http.Request) {
		contract.NewProblem(contract.CodeNotFound, "no such control resource").Write(w)
	})
}

// ServeHTTP serves the API.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.mux.ServeHTTP(w, r) }

// handler is a resource's handler, given its caller.
type handler func(w http.ResponseWriter, r *http.Request, c Caller)

// caller finds the request's principal, or answers 401.
func (a *API) caller(h handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p, ok := a.opts.Caller(r)
		if !ok || p.Tenant == "" {
			contract.NewProblem(contract.CodeUnauthorized, "no principal").Write(w)
			return
		}
		h(w, r, Of(p))
	}
}

// fail answers err as its problem; what is not found is named.
func fail(w http.ResponseWriter, err error, what string) {
	p := contract.ProblemFor(err)
	if p.Code == contract.CodeNotFound && what != "" {
		p.Detail = "no such " + what
	}
	p.Write(w)
}
