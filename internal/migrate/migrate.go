// Package migrate reads a store's embedded, numbered SQL migrations. Each
// store applies them itself, under its own lock (an advisory lock on
// PostgreSQL, an immediate transaction on SQLite), so that two processes
// starting at once apply each migration once.
package migrate

import (
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
)

// Migration is one numbered SQL file, e.g. 0001_init.sql.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// Load returns the migrations in dir, ordered by version. Versions must be
// unique and start at 1 without gaps, so a missing file is caught at once.
func Load(fsys fs.FS, dir string) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("read migrations: %w", err)
	}
	var out []Migration
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".sql") {
			continue
		}
		num, _, ok := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s: name must be NNNN_name.sql", e.Name())
		}
		body, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", e.Name(), err)
		}
		out = append(out, Migration{Version: v, Name: e.Name(), SQL: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i, m := range out {
		if m.Version != i+1 {
			return nil, fmt.Errorf("migration %s: expected version %d", m.Name, i+1)
		}
	}
	return out, nil
}

// Pending returns the migrations whose version is not in applied.
func Pending(all []Migration, applied map[int]bool) []Migration {
	var out []Migration
	for _, m := range all {
		if !applied[m.Version] {
			out = append(out, m)
		}
	}
	return out
}

// LoadThrough returns the migrations in dir up to the one named name,
// included: the schema of the release that name ended, which an
// upgrade's test starts from.
func LoadThrough(fsys fs.FS, dir, name string) ([]Migration, error) {
	all, err := Load(fsys, dir)
	if err != nil {
		return nil, err
	}
	for i, m := range all {
		if m.Name == name {
			return all[:i+1], nil
		}
	}
	return nil, fmt.Errorf("no migration %s", name)
}
