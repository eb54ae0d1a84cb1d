// Package yamlfile reads a configuration file the way every idemgate
// configuration is read: ${ENV} expanded (an unset variable is an error),
// every mapping key checked against the struct it fills (a typo is an
// error at its line, never a setting silently off), and the decoder's
// errors as FILE:LINE: message.
package yamlfile

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Decode reads data (named name in errors) into v, a pointer to a struct,
// and returns the document's node, for callers that note where each
// setting was written.
func Decode(name string, data []byte, v any) (*yaml.Node, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, Error(name, err)
	}
	if len(root.Content) == 0 {
		return nil, fmt.Errorf("%s: empty file", name)
	}
	if err := checkSizes(name, root.Content[0], root.Content[0].Line); err != nil {
		return nil, err
	}
	if err := expandEnv(name, &root); err != nil {
		return nil, err
	}
	if err := checkKnown(name, root.Content[0], reflect.TypeOf(v)); err != nil {
		return nil, err
	}
	if err := root.Decode(v); err != nil {
		return nil, Error(name, err)
	}
	return &root, nil
}

// MaxKeys bounds the keys of one mapping. The decoder compares each key of
// a mapping with every other (its duplicate check), so a mapping of n keys
// costs n²: 100,000 headers in a drill scenario ran for over a minute.
// Refused here in one pass, a file's cost stays linear in its size.
const MaxKeys = 1000

// checkSizes refuses a mapping of more than MaxKeys keys, at the line of
// the key that holds it (line, for the document's own).
func checkSizes(file string, n *yaml.Node, line int) error {
	if n.Kind == yaml.MappingNode && len(n.Content)/2 > MaxKeys {
		return fmt.Errorf("%s:%d: a mapping of %d keys: at most %d", file, line, len(n.Content)/2, MaxKeys)
	}
	for i, c := range n.Content {
		at := c.Line
		if n.Kind == yaml.MappingNode && i%2 == 1 {
			at = n.Content[i-1].Line // a value's mapping is named by its key
		}
		if err := checkSizes(file, c, at); err != nil {
			return err
		}
	}
	return nil
}

// checkKnown refuses any mapping key that names no field, at its line. (The
// decoder's own check is lost once the tree has been expanded, and a typo in
// a policy must not silently turn it off.)
func checkKnown(file string, n *yaml.Node, t reflect.Type) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case n.Kind == yaml.AliasNode:
		return checkKnown(file, n.Alias, t)
	case t == reflect.TypeOf(yaml.Node{}):
		return nil
	case t.Kind() == reflect.Struct && n.Kind == yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			f, ok := yamlField(t, n.Content[i].Value)
			if !ok {
				return fmt.Errorf("%s:%d: unknown key %q", file, n.Content[i].Line, n.Content[i].Value)
			}
			if err := checkKnown(file, n.Content[i+1], f.Type); err != nil {
				return err
			}
		}
	case (t.Kind() == reflect.Slice) && n.Kind == yaml.SequenceNode:
		for _, c := range n.Content {
			if err := checkKnown(file, c, t.Elem()); err != nil {
				return err
			}
		}
	case t.Kind() == reflect.Map && n.Kind == yaml.MappingNode:
		for i := 1; i < len(n.Content); i += 2 {
			if err := checkKnown(file, n.Content[i], t.Elem()); err != nil {
				return err
			}
		}
	}
	return nil
}

// yamlField finds the struct field a YAML key names.
func yamlField(t reflect.Type, key string) (reflect.StructField, bool) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if f.IsExported() && name == key {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// expandEnv replaces ${NAME} in every scalar; an unset variable is an error.
func expandEnv(name string, n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode && strings.Contains(n.Value, "${") {
		var missing string
		n.Value = envRef.ReplaceAllStringFunc(n.Value, func(ref string) string {
			v, ok := os.LookupEnv(ref[2 : len(ref)-1])
			if !ok && missing == "" {
				missing = ref
			}
			return v
		})
		if missing != "" {
			return fmt.Errorf("%s:%d: %s is not set in the environment", name, n.Line, missing)
		}
	}
	for _, c := range n.Content {
		if err := expandEnv(name, c); err != nil {
			return err
		}
	}
	return nil
}

var yamlLine = regexp.MustCompile(`^line (\d+): `)

// Error rewrites the decoder's errors as FILE:LINE: message.
func Error(name string, err error) error {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		msgs := make([]string, len(te.Errors))
		for i, e := range te.Errors {
			msgs[i] = name + ":" + yamlLine.ReplaceAllString(e, "$1: ")
		}
		return errors.New(strings.Join(msgs, "\n"))
	}
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	return fmt.Errorf("%s:%s", name, yamlLine.ReplaceAllString(strings.TrimPrefix(msg, "unmarshal errors:\n  "), "$1: "))
}
