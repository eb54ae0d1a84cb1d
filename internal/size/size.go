// Package size reads byte counts written for people: 1024, 64KiB, 1MiB,
// 2MB. The gateway's configuration and the stores' DSNs share it, so a
// size means the same wherever it is written.
package size

import (
	"fmt"
	"regexp"
	"strconv"
)

var units = map[string]int64{"": 1, "B": 1, "KB": 1000, "KiB": 1 << 10, "MB": 1000 * 1000, "MiB": 1 << 20,
	"GB": 1000 * 1000 * 1000, "GiB": 1 << 30, "TB": 1000 * 1000 * 1000 * 1000, "TiB": 1 << 40}

var pattern = regexp.MustCompile(`^\s*(\d+)\s*([A-Za-z]*)\s*$`)

// Parse reads a non-negative size such as "64MiB".
func Parse(s string) (int64, error) {
	m := pattern.FindStringSubmatch(s)
	if m == nil {
		return 0, fmt.Errorf("size %q: want a number of bytes, e.g. 1MiB", s)
	}
	unit, ok := units[m[2]]
	if !ok {
		return 0, fmt.Errorf("size %q: unknown unit %q (B, KB, KiB, MB, MiB, GB, GiB, TB, TiB)", s, m[2])
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil || n > (1<<62)/unit {
		return 0, fmt.Errorf("size %q: too large", s)
	}
	return n * unit, nil
}
