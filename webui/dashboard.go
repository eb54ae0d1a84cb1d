package webui

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Series is the gateway's own metrics history, which the dashboard charts:
// a small in-process ring kept by whoever serves /metrics.
type Series interface {
	// Indicators returns tenant's indicators over the last since, each
	// with its points oldest first. An indicator with no tenant label (a
	// store-wide one, say) may be returned to every tenant.
	Indicators(tenant string, since time.Duration) []Indicator
}

// Indicator is one charted quantity.
type Indicator struct {
	Name  string // the metric's name, e.g. idemgate_operations_created_total
	Title string // what a person reads: "Operations created"
	Help  string // one sentence
	// Unit is what a point's value counts, for the label: "per minute",
	// "seconds", "" for a plain count. A counter is best given as its
	// increase per interval, so that the line shows activity.
	Unit   string
	Points []Point
}

// Point is one sample.
type Point struct {
	At    time.Time
	Value float64
}

// dashWindow is how far back the dashboard looks.
const dashWindow = time.Hour

// chart is an indicator drawn as a sparkline, its coordinates computed
// here so that the page needs no script to draw it.
type chart struct {
	Indicator
	Path      string // SVG path data, in a 300×60 box
	Last, Max string
	Empty     bool
}

// dashboardData is the dashboard.
type dashboardData struct {
	Charts []chart
	NoData bool
	Window string
}

// dashboard charts the indicators of the last hour.
func (u *UI) dashboard(w http.ResponseWriter, r *http.Request, s *session) {
	data := dashboardData{Window: "the last hour", NoData: true}
	if u.opts.Series != nil {
		for _, in := range u.opts.Series.Indicators(s.principal.Tenant, dashWindow) {
			data.Charts = append(data.Charts, drawChart(in, u.opts.Now()))
		}
		data.NoData = len(data.Charts) == 0
	}
	u.render(w, r, http.StatusOK, "dashboard", u.page(s, "dashboard", "Dashboard", data))
}

// The chart's box, in SVG user units.
const (
	chartW = 300.0
	chartH = 60.0
	chartM = 2.0 // a margin, so that the stroke is not cut at the edges
)

// drawChart places in's points in the box: time across the last hour to
// now, values from 0 to the largest one.
func drawChart(in Indicator, now time.Time) chart {
	c := chart{Indicator: in, Empty: len(in.Points) == 0}
	if c.Empty {
		return c
	}
	top := 0.0
	for _, p := range in.Points {
		if finite(p.Value) {
			top = math.Max(top, p.Value)
		}
	}
	start := now.Add(-dashWindow)
	var b strings.Builder
	cmd := "M"
	for _, p := range in.Points {
		if !finite(p.Value) {
			cmd = "M" // a gap in the line
			continue
		}
		x := chartM + (chartW-2*chartM)*clamp(float64(p.At.Sub(start))/float64(dashWindow))
		y := chartH - chartM
		if top > 0 {
			y -= (chartH - 2*chartM) * clamp(p.Value/top)
		}
		fmt.Fprintf(&b, "%s%.1f %.1f ", cmd, x, y)
		cmd = "L"
	}
	c.Path = strings.TrimSpace(b.String())
	c.Last, c.Max = number(in.Points[len(in.Points)-1].Value), number(top)
	return c
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

func clamp(v float64) float64 { return math.Min(1, math.Max(0, v)) }

// number writes a value briefly: integers whole, others to three figures.
func number(v float64) string {
	switch {
	case !finite(v):
		return "—"
	case v == math.Trunc(v) && math.Abs(v) < 1e15:
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

// SeriesFunc is a function that is a Series: the gateway adapts its
// metrics history with one.
type SeriesFunc func(tenant string, since time.Duration) []Indicator

// Indicators calls f.
func (f SeriesFunc) Indicators(tenant string, since time.Duration) []Indicator {
	return f(tenant, since)
}
