package webui

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
)

// field is one member of a command, named by its JSON Pointer, with its
// value as JSON text: "1" and 1 look different, as they are. Amount is
// the value formatted when the route's schema marks it as minor units.
type field struct {
	Pointer, Value string
	Amount         string
}

// maxFields bounds the members listed; the whole command is shown below
// them in any case.
const maxFields = 200

// fieldsOf lists the command's scalar members by JSON Pointer and indents
// the whole of it. Both are text: the template escapes them, so a member
// holding markup is shown, never run.
func fieldsOf(cmd []byte, amounts []Amount) ([]field, string) {
	var buf bytes.Buffer
	if err := json.Indent(&buf, cmd, "", "  "); err != nil {
		return nil, string(cmd)
	}
	dec := json.NewDecoder(bytes.NewReader(cmd))
	dec.UseNumber() // an amount is shown as it was written, never rounded
	var v any
	if dec.Decode(&v) != nil {
		return nil, buf.String()
	}
	var out []field
	walk(&out, "", v)
	formatAmounts(out, amounts)
	return out, buf.String()
}

// formatAmounts fills the Amount of each field that amounts mark, when
// its currency is known: named by the mark, or read from the field it
// points to.
func formatAmounts(fields []field, amounts []Amount) {
	for _, a := range amounts {
		i := slices.IndexFunc(fields, func(f field) bool { return f.Pointer == a.Pointer })
		if i < 0 {
			continue
		}
		cur := a.Currency
		if strings.HasPrefix(cur, "/") {
			j := slices.IndexFunc(fields, func(f field) bool { return f.Pointer == a.Currency })
			if j < 0 {
				continue
			}
			cur, _ = strconv.Unquote(fields[j].Value)
		}
		fields[i].Amount, _ = minorUnits(fields[i].Value, cur)
	}
}

// walk appends v's scalars under pointer p, objects' members in name order.
func walk(out *[]field, p string, v any) {
	if len(*out) >= maxFields {
		return
	}
	switch x := v.(type) {
	case map[string]any:
		names := make([]string, 0, len(x))
		for k := range x {
			names = append(names, k)
		}
		slices.Sort(names)
		for _, k := range names {
			walk(out, p+"/"+escapePointer(k), x[k])
		}
	case []any:
		for i, el := range x {
			walk(out, p+"/"+strconv.Itoa(i), el)
		}
	default:
		if p == "" {
			p = "/"
		}
		*out = append(*out, field{Pointer: p, Value: literal(x)})
	}
}

// literal writes a scalar as JSON, with <, > and & as they are: the
// template escapes them for the page, and a person reads them as sent.
func literal(v any) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	return strings.TrimSuffix(b.String(), "\n")
}

// escapePointer escapes a member name in a JSON Pointer (RFC 6901).
func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// joinRoles writes roles for a sentence: "approver or admin".
func joinRoles(roles []string) string {
	switch len(roles) {
	case 0:
		return "(none)"
	case 1:
		return roles[0]
	}
	return strings.Join(roles[:len(roles)-1], ", ") + " or " + roles[len(roles)-1]
}
