package httpidem

import (
	"net/http"

	"github.com/idemgate/idemgate/approval"
	"github.com/idemgate/idemgate/keyed"
)

// approvalInput is req as an approval shows it and its policy reads it:
// what the request does, its command, and the headers an approved run
// sends again.
func (m *Middleware) approvalInput(r *http.Request, req *request) *keyed.ApprovalInput {
	in := approval.Input{Method: req.route.Method, Path: r.URL.EscapedPath(), Params: req.params, Query: req.query,
		Body: req.command, Headers: req.headers, Principal: req.principal}
	target := in.Method + " " + in.Path
	if req.route.Action != "" {
		target = req.target
	}
	if req.rawQuery != "" {
		target += "?" + req.rawQuery
	}
	return &keyed.ApprovalInput{Input: in, Command: req.command, Headers: approvalHeaders(req.header, req.route),
		Target: target}
}
