package approval

import (
	"encoding/json"
	"fmt"
	"strings"

	"cel.dev/cel-go/cel"
	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/operators"
	"cel.dev/cel-go/common/types"
)

// guard is a comparison of a body field with a literal in `when`. CEL's
// equality is heterogeneous: `body.environment == "production"` is simply
// false when the field is a list (as a form-encoded body makes every
// field) or a number. A condition that asks for approval when a field
// equals something would then let the request through unapproved; so a
// field the expression compares with a literal must have the literal's
// type, or the request is refused.
type guard struct {
	path []string // body.a.b → [a b]
	kind string   // "string", "number" or "bool"
}

// guardsOf lists the comparisons of body fields with literals in a: ==
// and != either way round, and `in` a list of literals.
func guardsOf(a *cel.Ast) []guard {
	nav := celast.NavigateAST(a.NativeRep())
	var out []guard
	for _, fn := range []string{operators.Equals, operators.NotEquals} {
		for _, call := range celast.MatchDescendants(nav, celast.FunctionMatcher(fn)) {
			args := call.AsCall().Args()
			for i := range 2 {
				if path, ok := bodyPath(args[i]); ok {
					out = appendGuard(out, path, args[1-i])
				}
			}
		}
	}
	for _, call := range celast.MatchDescendants(nav, celast.FunctionMatcher(operators.In)) {
		args := call.AsCall().Args()
		path, ok := bodyPath(args[0])
		if !ok || args[1].Kind() != celast.ListKind {
			continue
		}
		for _, el := range args[1].AsList().Elements() {
			out = appendGuard(out, path, el)
		}
	}
	return out
}

func appendGuard(out []guard, path []string, lit celast.Expr) []guard {
	if lit.Kind() != celast.LiteralKind {
		return out
	}
	var kind string
	switch lit.AsLiteral().(type) {
	case types.String:
		kind = "string"
	case types.Int, types.Uint, types.Double:
		kind = "number"
	case types.Bool:
		kind = "bool"
	default:
		return out
	}
	return append(out, guard{path: path, kind: kind})
}

// bodyPath reads e as a chain of selections (or indexes by a string
// literal) from the body: body.a["b"] → [a b].
func bodyPath(e celast.Expr) ([]string, bool) {
	var rev []string
	for {
		switch e.Kind() {
		case celast.IdentKind:
			if id := e.AsIdent(); id != "body" && id != "args" || len(rev) == 0 {
				return nil, false
			}
			path := make([]string, len(rev))
			for i, s := range rev {
				path[len(rev)-1-i] = s
			}
			return path, true
		case celast.SelectKind:
			sel := e.AsSelect()
			if sel.IsTestOnly() {
				return nil, false
			}
			rev, e = append(rev, sel.FieldName()), sel.Operand()
		case celast.CallKind:
			call := e.AsCall()
			args := call.Args()
			if call.FunctionName() != operators.Index || len(args) != 2 || args[1].Kind() != celast.LiteralKind {
				return nil, false
			}
			s, ok := args[1].AsLiteral().(types.String)
			if !ok {
				return nil, false
			}
			rev, e = append(rev, string(s)), args[0]
		default:
			return nil, false
		}
	}
}

// check refuses a body whose field, where present, is not of the type the
// expression compares it with.
func (g guard) check(body any) error {
	v := body
	for _, name := range g.path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil // not there: CEL itself says so, or has() guards it
		}
		if v, ok = m[name]; !ok {
			return nil
		}
	}
	got := kindOf(v)
	if got == g.kind || got == "null" {
		return nil
	}
	return fmt.Errorf("body.%s is a %s where the policy compares it with a %s; refused rather than "+
		"decided without an approval", strings.Join(g.path, "."), got, g.kind)
}

func kindOf(v any) string {
	switch v.(type) {
	case string:
		return "string"
	case json.Number, float64, int, int64:
		return "number"
	case bool:
		return "bool"
	case nil:
		return "null"
	case []any:
		return "list"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}
