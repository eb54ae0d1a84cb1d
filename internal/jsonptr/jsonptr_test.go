package jsonptr

import (
	"reflect"
	"testing"
)

func TestPointers(t *testing.T) {
	doc := map[string]any{"a": map[string]any{"b/c": []any{"x", "y"}, "m~n": 1.0}, "": "empty"}
	cases := map[string]any{"/a/b~1c/1": "y", "/a/m~0n": 1.0, "/": "empty"}
	for ptr, want := range cases {
		toks, err := Parse(ptr)
		if err != nil {
			t.Fatal(err)
		}
		if got, ok := Get(doc, toks); !ok || !reflect.DeepEqual(got, want) {
			t.Errorf("Get(%s) = %v, %v", ptr, got, ok)
		}
	}
	for _, bad := range []string{"a", "/x~2"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
	for _, missing := range []string{"/z", "/a/b~1c/2", "/a/b~1c/01", "/a/m~0n/x"} {
		toks, _ := Parse(missing)
		if _, ok := Get(doc, toks); ok {
			t.Errorf("Get(%s) found something", missing)
		}
	}
	toks, _ := Parse("/a/m~0n")
	if !Remove(doc, toks) || Remove(doc, toks) {
		t.Error("Remove twice")
	}
	if _, ok := doc["a"].(map[string]any)["m~n"]; ok {
		t.Error("member still there")
	}
}
