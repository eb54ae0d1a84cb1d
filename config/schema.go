package config

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/idemgate/idemgate/fingerprint"
)

// loadSchema compiles a route's JSON Schema (2020-12 unless it says
// otherwise). Object schemas that do not say what to do with properties
// they do not list refuse them: an unknown field would otherwise pass
// unchecked and, worse, change the fingerprint of the same command.
func loadSchema(path string) (func(any) (any, error), error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	closeObjects(doc)
	if err := checkDefaults(doc, ""); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	url, _ := filepath.Abs(path)
	if err := c.AddResource(url, doc); err != nil {
		return nil, err
	}
	sch, err := c.Compile(url)
	if err != nil {
		return nil, err
	}
	name := filepath.Base(path)
	return func(cmd any) (any, error) {
		cmd = applyDefaults(doc, cmd)
		if err := sch.Validate(cmd); err != nil {
			// The schema's file path is the gateway's business, not the caller's.
			msg := strings.ReplaceAll(err.Error(), "file://"+url, name)
			return nil, errors.New(strings.ReplaceAll(msg, url, name))
		}
		return cmd, nil
	}, nil
}

// closeObjects sets additionalProperties: false on every object schema with
// properties that sets neither it nor unevaluatedProperties.
func closeObjects(s any) {
	switch x := s.(type) {
	case map[string]any:
		_, hasProps := x["properties"]
		_, hasAdd := x["additionalProperties"]
		_, hasUneval := x["unevaluatedProperties"]
		if hasProps && !hasAdd && !hasUneval {
			x["additionalProperties"] = false
		}
		for _, v := range x {
			closeObjects(v)
		}
	case []any:
		for _, v := range x {
			closeObjects(v)
		}
	}
}

// checkDefaults refuses, at start-up, a default that could not be part of
// a command: one the fingerprint's parser would refuse (a number a double
// would round) would otherwise be skipped without a word, and a command
// that omits it would differ from one that sends it.
func checkDefaults(s any, at string) error {
	switch x := s.(type) {
	case map[string]any:
		if def, has := x["default"]; has {
			b, err := fingerprint.Canonical(def)
			if err == nil {
				_, err = fingerprint.Parse(b, fingerprint.Limits{})
			}
			if err != nil {
				return fmt.Errorf("default at %s/default: %w", at, err)
			}
		}
		for k, v := range x {
			if err := checkDefaults(v, at+"/"+strings.NewReplacer("~", "~0", "/", "~1").Replace(k)); err != nil {
				return err
			}
		}
	case []any:
		for i, v := range x {
			if err := checkDefaults(v, fmt.Sprintf("%s/%d", at, i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// applyDefaults fills absent object members that the schema gives a
// default, before validation and fingerprinting: sending the default and
// omitting it are the same command.
func applyDefaults(schema, v any) any {
	s, ok := schema.(map[string]any)
	if !ok {
		return v
	}
	obj, ok := v.(map[string]any)
	props, _ := s["properties"].(map[string]any)
	if !ok || props == nil {
		return v
	}
	for name, ps := range props {
		p, _ := ps.(map[string]any)
		if cur, present := obj[name]; present {
			obj[name] = applyDefaults(p, cur)
		} else if def, has := p["default"]; has {
			// checkDefaults proved at start-up that this cannot fail.
			b, _ := fingerprint.Canonical(def)
			obj[name], _ = fingerprint.Parse(b, fingerprint.Limits{})
		}
	}
	return obj
}
