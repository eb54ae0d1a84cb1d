package gateway

import (
	"github.com/idemgate/idemgate/config"
	"net/http"
	"strings"

	"github.com/idemgate/idemgate/contract"
)

// This file chooses, for each request, the shape of the refusals it may
// get (docs/design.md, "Error shapes"): its route's upstream's, for the
// refusals of the idempotency layer as for the gateway's own (a bad token,
// a missing role, a limit, a path no route serves).

// shapes knows each route's shape.
type shapes struct {
	mux      *http.ServeMux            // the routes: which one a request is for
	byRoute  map[string]contract.Shape // by pattern, as registered on mux
	prefixes []prefixShape             // every route's literal leading segments, in configuration order
}

// prefixShape is a route's literal path segments (those before its first
// parameter) and its upstream's shape.
type prefixShape struct {
	segments []string
	shape    contract.Shape
}

// newShapes returns the shapes of cfg's routes, or nil when no upstream
// declares one: then every refusal is RFC 9457's, at no cost.
func newShapes(cfg *config.Config, mux *http.ServeMux) *shapes {
	s := &shapes{mux: mux, byRoute: map[string]contract.Shape{}}
	shaped := false
	for _, rc := range cfg.Routes {
		shape := cfg.Upstreams[rc.Upstream].Errors.Shape()
		if shape == nil {
			shape = contract.ProblemShape
		} else {
			shaped = true
		}
		s.byRoute[rc.Method()+" "+rc.Pattern()] = shape
		s.prefixes = append(s.prefixes, prefixShape{segments: literalSegments(rc.Pattern()), shape: shape})
	}
	if !shaped {
		return nil
	}
	return s
}

// shaping gives next a writer whose problems take the shape of the
// request's route (contract.Shaped).
func (g *Gateway) shaping(next http.Handler) http.Handler {
	if g.shapes == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(contract.Shaped(w, g.shapes.of(r)), r)
	})
}

// of is the shape of r's route; for a request no route serves, that of the
// route whose path shares the most leading segments with r's (at least
// one: /v1/refunds is answered as /v1/customers is); else RFC 9457's.
func (s *shapes) of(r *http.Request) contract.Shape {
	if _, pattern := s.mux.Handler(r); pattern != "" {
		if shape, ok := s.byRoute[pattern]; ok {
			return shape
		}
	}
	segments := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	best, shape := 0, contract.ProblemShape
	for _, p := range s.prefixes {
		n := 0
		for n < len(p.segments) && n < len(segments) && p.segments[n] == segments[n] {
			n++
		}
		if n > best {
			best, shape = n, p.shape
		}
	}
	return shape
}

// literalSegments are a pattern's path segments before its first
// parameter.
func literalSegments(pattern string) []string {
	var out []string
	for _, seg := range strings.Split(strings.Trim(pattern, "/"), "/") {
		if seg == "" || strings.Contains(seg, "{") {
			break
		}
		out = append(out, seg)
	}
	return out
}
