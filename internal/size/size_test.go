package size

import "testing"

func TestParse(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "1024": 1024, "64KiB": 64 << 10, " 1 MiB ": 1 << 20, "2MB": 2e6,
		"1GiB": 1 << 30, "3TiB": 3 << 40} {
		if got, err := Parse(in); err != nil || got != want {
			t.Errorf("Parse(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "-1", "1.5MiB", "1 parsecs", "MiB", "99999999999999999999", "9999999TiB"} {
		if got, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) = %d, want an error", bad, got)
		}
	}
}
