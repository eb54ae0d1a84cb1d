package drill

import (
	"bytes"
	"encoding/xml"
	"flag"
	"os"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden report")

// sampleResults is one result of each verdict, as a report shows them.
var sampleResults = []Result{
	{ID: "wf-1", Check: "same request twice", Covers: []string{"wf-1"}, Requests: 2, Effects: 1, Expected: 1,
		Verdict: Passed, Reason: "1 effect(s), as intended"},
	{ID: "wf-5", Check: "lost response, then a retry", Covers: []string{"wf-5", "agent-1"}, Requests: 2, Effects: 2,
		Expected: 1, Verdict: FailedCheck, Finding: FindingDuplicate, Reason: "2 effects for 1 intended"},
	{ID: "wf-7", Check: "approval expires before execution", Covers: []string{"wf-7"}, Verdict: NotApplicable,
		Reason: "needs approvals"},
}

// TestReportJSON: the --json shape is stable: the golden file is what
// README.md documents; a change to it is a change to the contract.
func TestReportJSON(t *testing.T) {
	var b bytes.Buffer
	if err := WriteJSON(&b, "http://127.0.0.1:9090", sampleResults); err != nil {
		t.Fatal(err)
	}
	const golden = "testdata/report.golden.json"
	if *update {
		if err := os.WriteFile(golden, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil || !bytes.Equal(b.Bytes(), want) {
		t.Fatalf("report changed (%v):\n%s\nwant:\n%s", err, b.String(), want)
	}
}

// TestReportJUnit: the JUnit output parses as JUnit XML, a failed check a
// failure with its finding, one not applicable skipped with its reason.
func TestReportJUnit(t *testing.T) {
	var b bytes.Buffer
	if err := WriteJUnit(&b, "http://t", sampleResults); err != nil {
		t.Fatal(err)
	}
	var suite junitSuite
	if err := xml.Unmarshal(b.Bytes(), &suite); err != nil {
		t.Fatalf("%v:\n%s", err, b.String())
	}
	c := suite.Cases
	if suite.Tests != 3 || suite.Failures != 1 || suite.Skipped != 1 || len(c) != 3 ||
		c[0].Failure != nil || c[0].Skipped != nil || c[1].Failure == nil || c[1].Failure.Message != FindingDuplicate ||
		c[2].Skipped == nil || c[2].Skipped.Message != "needs approvals" || c[1].Name != "wf-5: lost response, then a retry" {
		t.Fatalf("junit %+v:\n%s", suite, b.String())
	}
}

// TestReportTable: the terminal table shows every check with its verdict
// and finding, "-" for the counts of one not applicable.
func TestReportTable(t *testing.T) {
	var b bytes.Buffer
	if err := WriteTable(&b, sampleResults); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "ID") || !strings.Contains(lines[2], "failed (duplicate_effect)") ||
		!strings.Contains(lines[3], "-") || !Failed(sampleResults) || Failed(sampleResults[:1]) {
		t.Fatalf("table:\n%s", b.String())
	}
}
