package migrate

import (
	"testing"
	"testing/fstest"
)

func TestLoad(t *testing.T) {
	fsys := fstest.MapFS{
		"m/0002_b.sql": {Data: []byte("B")},
		"m/0001_a.sql": {Data: []byte("A")},
		"m/README":     {Data: []byte("ignored")},
	}
	all, err := Load(fsys, "m")
	if err != nil || len(all) != 2 || all[0].SQL != "A" || all[1].Version != 2 {
		t.Fatalf("%+v %v", all, err)
	}
	if p := Pending(all, map[int]bool{1: true}); len(p) != 1 || p[0].Name != "0002_b.sql" {
		t.Fatalf("pending %+v", p)
	}
	for name, bad := range map[string]fstest.MapFS{
		"gap":     {"m/0001_a.sql": {}, "m/0003_c.sql": {}},
		"dup":     {"m/0001_a.sql": {}, "m/0001_b.sql": {}},
		"unnamed": {"m/init.sql": {}},
	} {
		if _, err := Load(bad, "m"); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestLoadThrough(t *testing.T) {
	fsys := fstest.MapFS{"m/0001_a.sql": {Data: []byte("A")}, "m/0002_b.sql": {Data: []byte("B")},
		"m/0003_c.sql": {Data: []byte("C")}}
	if got, err := LoadThrough(fsys, "m", "0002_b.sql"); err != nil || len(got) != 2 || got[1].SQL != "B" {
		t.Fatalf("%+v %v", got, err)
	}
	if _, err := LoadThrough(fsys, "m", "0004_d.sql"); err == nil {
		t.Fatal("a migration that is not there")
	}
}
