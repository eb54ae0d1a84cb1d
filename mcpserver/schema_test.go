package mcpserver_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
)

// schema is the part of a JSON Schema the portability check reads.
type schema struct {
	Type                 json.RawMessage    `json:"type"`
	Description          string             `json:"description"`
	Enum                 []any              `json:"enum"`
	Properties           map[string]*schema `json:"properties"`
	Required             []string           `json:"required"`
	Items                *schema            `json:"items"`
	AdditionalProperties json.RawMessage    `json:"additionalProperties"`
}

// Every tool's input and output schema is one a strict client takes: one
// type per value (no ["null","array"]), every property typed and described,
// method and mode closed by an enum, and the fields that are always there
// listed as required (not the approval nor the state, there only when
// they say something). It is what the MCP Inspector's --strict listing
// checks, without Node.
func TestSchemasArePortable(t *testing.T) {
	res := listTools(t)
	required := map[string][]string{
		"submit_write input":      {"method", "path"},
		"submit_write output":     {"intent", "step", "kind", "sent", "reason", "operation_id", "status", "body", "attempts", "next_step"},
		"operation_status output": {"intent", "step", "kind", "sent", "reason", "operation_id", "status", "body", "attempts", "next_step"},
		"list_operations output":  {"intents"},
	}
	for _, tool := range res.Tools {
		for side, v := range map[string]any{"input": tool.InputSchema, "output": tool.OutputSchema} {
			name := tool.Name + " " + side
			var s schema
			b, _ := json.Marshal(v)
			if err := json.Unmarshal(b, &s); err != nil {
				t.Fatalf("%s: %v: %s", name, err, b)
			}
			for _, problem := range portability(name, &s, true) {
				t.Error(problem)
			}
			if want := required[name]; !slices.Equal(sorted(s.Required), sorted(want)) {
				t.Errorf("%s: required %v, want %v", name, s.Required, want)
			}
			// An approval, when there is one, has each of its fields (empty: none).
			if a := s.Properties["approval"]; side == "output" && a != nil &&
				!slices.Equal(sorted(a.Required), []string{"expires_at", "id", "status", "summary"}) {
				t.Errorf("%s: approval requires %v", name, a.Required)
			}
		}
	}
}

// portability lists what a strict client would refuse in s, found at path.
func portability(path string, s *schema, root bool) []string {
	var problems []string
	var typ string
	if err := json.Unmarshal(s.Type, &typ); err != nil || typ == "" {
		problems = append(problems, fmt.Sprintf("%s: type %s, want one type", path, s.Type))
	}
	if !root && s.Description == "" && !isItems(path) {
		problems = append(problems, path+": no description")
	}
	for name, p := range s.Properties {
		if (name == "method" || name == "mode") && len(p.Enum) == 0 {
			problems = append(problems, path+"."+name+": no enum")
		}
		problems = append(problems, portability(path+"."+name, p, false)...)
	}
	if s.Items != nil {
		problems = append(problems, portability(path+"[]", s.Items, false)...)
	}
	if typ == "object" && string(s.AdditionalProperties) != "true" && len(s.Properties) == 0 && !root {
		problems = append(problems, path+": an object with no properties must say it takes any")
	}
	return problems
}

func isItems(path string) bool { return len(path) > 2 && path[len(path)-2:] == "[]" }

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}
