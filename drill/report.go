package drill

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"text/tabwriter"
)

// Failed reports whether the exit status must say so: a check failed (it
// found a duplicate effect, a lost answer, a silent replay of a changed
// payload, or another of the findings).
func Failed(results []Result) bool {
	for _, r := range results {
		if r.Serious() {
			return true
		}
	}
	return false
}

// WriteTable writes the report card: check, requests, effects, expected,
// verdict, and why.
func WriteTable(w io.Writer, results []Result) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tCHECK\tREQUESTS\tEFFECTS\tEXPECTED\tVERDICT\tWHY")
	for _, r := range results {
		effects, expected := fmt.Sprint(r.Effects), fmt.Sprint(r.Expected)
		if r.Verdict == NotApplicable {
			effects, expected = "-", "-"
		}
		verdict := string(r.Verdict)
		if r.Finding != "" {
			verdict += " (" + r.Finding + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", r.ID, r.Check, r.Requests, effects, expected, verdict, r.Reason)
	}
	return tw.Flush()
}

// ReportVersion is the version of the --json shape; it changes only when
// a member changes meaning or goes away.
const ReportVersion = 1

// Report is the --json output: stable, documented in README.md.
type Report struct {
	Version int      `json:"version"`
	Target  string   `json:"target"`
	Passed  int      `json:"passed"`
	Failed  int      `json:"failed"`
	NA      int      `json:"not_applicable"`
	Serious bool     `json:"serious"` // the exit status is 1
	Checks  []Result `json:"checks"`
}

// WriteJSON writes the report as one JSON object.
func WriteJSON(w io.Writer, target string, results []Result) error {
	rep := Report{Version: ReportVersion, Target: target, Serious: Failed(results), Checks: results}
	for _, r := range results {
		switch r.Verdict {
		case Passed:
			rep.Passed++
		case FailedCheck:
			rep.Failed++
		default:
			rep.NA++
		}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

type junitSuite struct {
	XMLName  xml.Name    `xml:"testsuite"`
	Name     string      `xml:"name,attr"`
	Tests    int         `xml:"tests,attr"`
	Failures int         `xml:"failures,attr"`
	Skipped  int         `xml:"skipped,attr"`
	Cases    []junitCase `xml:"testcase"`
}

type junitCase struct {
	Name    string        `xml:"name,attr"`
	Class   string        `xml:"classname,attr"`
	Failure *junitMessage `xml:"failure,omitempty"`
	Skipped *junitMessage `xml:"skipped,omitempty"`
}

type junitMessage struct {
	Message string `xml:"message,attr"`
	Text    string `xml:",chardata"`
}

// WriteJUnit writes the report as JUnit XML, for a team's CI: a failed
// check is a failure, one that cannot apply is skipped.
func WriteJUnit(w io.Writer, target string, results []Result) error {
	s := junitSuite{Name: "idemgate drill " + target, Tests: len(results)}
	for _, r := range results {
		c := junitCase{Name: r.ID + ": " + r.Check, Class: "idemgate.drill"}
		text := fmt.Sprintf("%d requests, %d effects, %d expected: %s", r.Requests, r.Effects, r.Expected, r.Reason)
		switch r.Verdict {
		case FailedCheck:
			s.Failures++
			c.Failure = &junitMessage{Message: r.Finding, Text: text}
		case NotApplicable:
			s.Skipped++
			c.Skipped = &junitMessage{Message: r.Reason}
		}
		s.Cases = append(s.Cases, c)
	}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(s); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}
