package mcpserver

import (
	"github.com/google/jsonschema-go/jsonschema"
)

// enums are the closed sets of values a property takes, by name, wherever
// it appears: a client that knows them need not guess, and one that checks
// them refuses a typo before it is sent.
var enums = map[string][]any{
	"method": {"POST", "PUT", "PATCH", "DELETE"},
	"mode":   {"resume", "repeat", "revise"},
	"kind": {"intent_created", "created", "replayed", "succeeded", "in_progress", "needs_approval", "conflict", "rejected",
		"unauthorized", "unknown", "failed"},
	"sent": {"no", "maybe", "yes"},
}

// schemaFor is T's schema, inferred from its fields (descriptions from
// their jsonschema tags) and made portable: several MCP clients map tool
// schemas onto a dialect with one type per value and no "null", so the
// nullable unions inferred for slices lose their null (the server never
// sends one: its slices are made non-nil), and each property named in
// enums gets its values. A failure is a programming error in this
// package's own types.
func schemaFor[T any]() *jsonschema.Schema {
	s, err := jsonschema.For[T](nil)
	if err != nil {
		panic(err)
	}
	portable(s)
	return s
}

func portable(s *jsonschema.Schema) {
	if len(s.Types) == 2 && s.Types[0] == "null" {
		s.Type, s.Types = s.Types[1], nil
	}
	for name, p := range s.Properties {
		if values, ok := enums[name]; ok {
			p.Enum = values
		}
		if name == "mode" {
			p.Default = []byte(`"resume"`)
		}
		portable(p)
	}
	if s.Items != nil {
		portable(s.Items)
	}
}
