package config

import (
	"testing"
)

// FuzzParseConfig: the parser a reload runs on whatever the file holds
// never panics, and a configuration it accepts may replace itself (a
// reload of an unchanged file is applied, not refused).
func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(goodConfig))
	f.Add([]byte("store: sqlite:/x.db\nroutes:\n  - {match: POST /x, upstream: nowhere}\n"))
	f.Add([]byte("store: sqlite:/x.db\nlisten: [\n"))
	f.Add([]byte("store: sqlite:/x.db\nupstreams: {a: {url: http://h}}\nroutes: [{match: POST /a/{id}, upstream: a}]\n" +
		"limits: {default: {rate: 5/s, burst: 2}, tenants: {t: {max_live: 3}}}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse("fuzz.yaml", data)
		if err != nil {
			return
		}
		again, err := Parse("fuzz.yaml", data)
		if err != nil {
			t.Fatalf("accepted once, refused the second time: %v", err)
		}
		if err := cfg.Reloadable(again); err != nil {
			t.Fatalf("the same file is refused as a reload: %v", err)
		}
	})
}
