package reconcile

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"text/template"
	"text/template/parse"
)

// A probe's values come from the write, that is from the agent: a value
// must name one record and never change which resource is read (issue 24,
// 7.1). So each value of a template is given, at Compile, a last step of
// its pipeline that knows its place: a path segment or a query value.

// place is where a value stands in a probe's target.
type place int

const (
	inPath place = iota
	inQuery
)

// valueError is a value a probe refuses. It names the value's place in
// the template ("{{.body.ref}}"), never the value.
type valueError struct {
	source, why string
}

func (e *valueError) Error() string { return fmt.Sprintf("the value of {{%s}} %s", e.source, e.why) }

// placeValues gives each value of t the escaper of its place, and returns
// t's literal path up to its first value. A template whose places its text
// does not tell (a branch, a loop, a template of its own) is refused, as
// is a literal path with a dot segment or a fragment.
func placeValues(t *template.Template) (string, error) {
	if len(t.Templates()) > 1 {
		return "", errors.New("a probe defines no templates")
	}
	nodes := t.Root.Nodes
	funcs := template.FuncMap{}
	where, prefix, literal := inPath, "", true
	for i, n := range nodes {
		switch n := n.(type) {
		case *parse.TextNode:
			text := string(n.Text)
			if err := checkLiteral(text, where, i == 0, i == len(nodes)-1); err != nil {
				return "", err
			}
			if literal {
				prefix += text
			}
			if strings.Contains(text, "?") {
				where = inQuery
			}
		case *parse.ActionNode:
			if len(n.Pipe.Decl) > 0 {
				return "", fmt.Errorf("%s: a probe declares no variables", n)
			}
			literal = false
			name := "idemgateValue" + strconv.Itoa(i)
			funcs[name] = where.escaper(strings.Trim(n.Pipe.String(), "{}"))
			ident := parse.NewIdentifier(name).SetTree(nil).SetPos(n.Pos)
			n.Pipe.Cmds = append(n.Pipe.Cmds, &parse.CommandNode{NodeType: parse.NodeCommand, Pos: n.Pos,
				Args: []parse.Node{ident}})
		case *parse.CommentNode:
		default:
			return "", fmt.Errorf("%s: a probe holds values ({{.body.ref}}), not branches, loops or templates", n)
		}
	}
	t.Funcs(funcs)
	prefix, _, _ = strings.Cut(prefix, "?")
	return prefix, nil
}

// checkLiteral refuses a fragment anywhere, and a dot segment in the
// literal path: only the segments text holds whole, bounded by slashes or
// by the path's ends, are its own.
func checkLiteral(text string, where place, first, last bool) error {
	if strings.ContainsAny(text, "#\\") {
		return fmt.Errorf("%q: a probe has no fragment and no backslash", text)
	}
	if where != inPath {
		return nil
	}
	path, _, ended := strings.Cut(text, "?")
	parts := strings.Split(path, "/")
	for k, part := range parts {
		whole := (k > 0 || first) && (k < len(parts)-1 || ended || last)
		if whole && (part == "." || part == "..") {
			return fmt.Errorf("%q: a probe's path has no dot segment", text)
		}
	}
	return nil
}

// escaper is the last step of the pipeline of the value source: the value
// as a scalar, refused if it is empty or a dot segment, escaped.
func (where place) escaper(source string) func(any) (string, error) {
	return func(v any) (string, error) {
		s, err := scalar(v)
		if err != nil {
			return "", &valueError{source, err.Error() + ": a probe takes only a string, an integer or a boolean"}
		}
		switch {
		case s == "":
			return "", &valueError{source, "is empty"}
		case s == "." || s == "..":
			return "", &valueError{source, "is a dot segment"}
		case where == inPath && hasDotSegment(s):
			return "", &valueError{source, "holds a dot segment between slashes"}
		}
		return escape(s), nil
	}
}

// scalar is v's text if v is a string, an integer or a boolean.
func scalar(v any) (string, error) {
	switch v := v.(type) {
	case string:
		return v, nil
	case bool:
		return strconv.FormatBool(v), nil
	case json.Number:
		return integer(v)
	case int:
		return strconv.Itoa(v), nil
	case int64:
		return strconv.FormatInt(v, 10), nil
	case nil:
		return "", errors.New("is null")
	case map[string]any:
		return "", errors.New("is an object")
	case []any, []string:
		return "", errors.New("is a list")
	}
	return "", fmt.Errorf("is a %T", v)
}

// integer is n in decimal if it is an integer a double holds exactly
// (1e2 is 100); a fraction is not a record's name.
func integer(n json.Number) (string, error) {
	if i, err := strconv.ParseInt(string(n), 10, 64); err == nil {
		return strconv.FormatInt(i, 10), nil
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return "", errors.New("is a number that is not an integer")
	}
	return strconv.FormatInt(int64(f), 10), nil
}

// hasDotSegment reports whether s, split at slashes or backslashes, holds
// "." or "..": an upstream that decodes %2F before it routes, or takes "\"
// for "/", would climb with it.
func hasDotSegment(s string) bool {
	for _, part := range strings.FieldsFunc(s, func(r rune) bool { return r == '/' || r == '\\' }) {
		if part == "." || part == ".." {
			return true
		}
	}
	return false
}

// escape percent-encodes every byte of s but the unreserved ones (RFC 3986,
// 2.3). It is the strictest form fit for both places: in a path segment it
// escapes "/", "?", ";" and "#"; in a query value "&", "=", "+" and "#"; and
// sub-delimiters an upstream might read (a matrix ";", a "," list) in both.
// The place decides what is refused: a dot segment matters only in a path.
func escape(s string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' ||
			c == '_' || c == '~' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}
