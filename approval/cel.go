package approval

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/ext"
	"cel.dev/cel-go/interpreter"
)

// principalType is the CEL name of principalView. Declaring principal as an
// object rather than a map makes `principal.nmae` a start-up error.
const principalType = "idemgate.Principal"

// principalView is Principal with the lower-case field names `when` uses.
type principalView struct {
	Name   string   `cel:"name"`
	Tenant string   `cel:"tenant"`
	Roles  []string `cel:"roles"`
}

// newEnv declares the variables `when` may use.
func newEnv() (*cel.Env, error) {
	return cel.NewEnv(
		cel.Types(cel.NativeTypeFor[principalView](
			cel.NativeTypeAlias(principalType), types.ParseStructTags(true))),
		cel.Variable("method", cel.StringType),
		cel.Variable("path", cel.StringType),
		cel.Variable("params", cel.MapType(cel.StringType, cel.StringType)),
		cel.Variable("query", cel.MapType(cel.StringType, cel.ListType(cel.StringType))),
		cel.Variable("body", cel.DynType),
		// args is the body by its MCP name: a tool call's arguments.
		cel.Variable("args", cel.DynType),
		cel.Variable("headers", cel.MapType(cel.StringType, cel.StringType)),
		cel.Variable("principal", cel.ObjectType(principalType)),
		cel.CrossTypeNumericComparisons(true),
		ext.Strings(),
		wrapAdapter,
	)
}

// wrapAdapter puts bodyAdapter in front of the environment's own adapter.
// It must come after cel.Types, which the wrapped adapter has to know about.
func wrapAdapter(e *cel.Env) (*cel.Env, error) {
	return cel.CustomTypeAdapter(bodyAdapter{next: e.CELTypeAdapter()})(e)
}

// compileWhen parses and type-checks src and plans it for evaluation, with
// the guards its comparisons of body fields need.
func compileWhen(src string) (cel.Program, []guard, error) {
	e, err := env()
	if err != nil {
		return nil, nil, err
	}
	ast, iss := e.Compile(src)
	if iss.Err() != nil {
		return nil, nil, iss.Err()
	}
	// dyn is let through: `body.approve` is dyn, and its result is checked
	// when it is evaluated.
	if t := ast.OutputType(); !t.IsExactType(cel.BoolType) && !t.IsExactType(cel.DynType) {
		return nil, nil, fmt.Errorf("must be bool, not %s", t)
	}
	prg, err := e.Program(ast,
		cel.EvalOptions(cel.OptOptimize),
		cel.CostLimit(costLimit),
	)
	return prg, guardsOf(ast), err
}

// activation hands CEL the request's variables. Each is produced only when
// the expression names it, and none is copied. It holds the Input by value so
// that one allocation covers both.
type activation struct{ in Input }

// ResolveName implements interpreter.Activation.
func (a *activation) ResolveName(name string) (any, bool) {
	switch name {
	case "method":
		return a.in.Method, true
	case "path":
		return a.in.Path, true
	case "params":
		return a.in.Params, true
	case "query":
		return a.in.Query, true
	case "body", "args":
		return a.in.Body, true
	case "headers":
		return a.in.Headers, true
	case "principal":
		p := a.in.Principal
		return &principalView{Name: p.Name, Tenant: p.Tenant, Roles: p.Roles}, true
	}
	return nil, false
}

// Parent implements interpreter.Activation.
func (a *activation) Parent() interpreter.Activation { return nil }

// bodyAdapter converts the body's values as CEL reaches them, so that an
// evaluation converts only what the expression looks at and never copies the
// body. It keeps itself as the adapter of the maps and lists it wraps, so
// numbers at any depth get the same treatment.
type bodyAdapter struct{ next types.Adapter }

// NativeToValue implements types.Adapter.
func (a bodyAdapter) NativeToValue(v any) ref.Val {
	switch v := v.(type) {
	case json.Number:
		return numberValue(v)
	case map[string]any:
		return types.NewStringInterfaceMap(a, v)
	case []any:
		return types.NewDynamicList(a, v)
	}
	return a.next.NativeToValue(v)
}

// errNumber is what CEL sees for a json.Number that is not a number. A
// validated body never has one; the message leaves the value out.
var errNumber = errors.New("invalid number in body")

// numberValue gives a JSON number the CEL type that holds it exactly: int for
// an integer literal within int64, uint beyond that up to uint64, else double.
func numberValue(n json.Number) ref.Val {
	s := string(n)
	if isIntegerLiteral(s) {
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return types.Int(i)
		}
		if s[0] != '-' {
			if u, err := strconv.ParseUint(s, 10, 64); err == nil {
				return types.Uint(u)
			}
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return types.WrapErr(errNumber)
	}
	// Out of range, ParseFloat gives ±Inf or 0: the nearest double.
	return types.Double(f)
}

// isIntegerLiteral reports whether s is an optional minus sign and digits
// only, the JSON form of an integer. ParseInt alone would also take "+1".
func isIntegerLiteral(s string) bool {
	if len(s) > 0 && s[0] == '-' {
		s = s[1:]
	}
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
