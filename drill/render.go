package drill

import (
	"bytes"
	"fmt"
	"text/template"
	"time"
)

// The bounds of a rendered template: a body larger than a gateway accepts
// by default is no drill's, and a template is text to fill in, not a
// program to run. A scenario past them is refused, naming its line,
// before it spends the machine's memory or time.
const maxRendered = 1 << 20

// renderTimeout is the time bound; a variable so that a test can shorten
// it: a loop that outlasts it cannot be stopped, and one made to outlast
// a second burned a core for the rest of the test process (over a minute
// and a half under -race).
var renderTimeout = time.Second

// errSlow is the refusal of a template past renderTimeout.
func errSlow() error { return fmt.Errorf("it takes longer than %s to render", renderTimeout) }

// boundedWriter keeps what a template writes, refusing a write past
// maxRendered or past its deadline: either ends the execution at once.
type boundedWriter struct {
	buf      bytes.Buffer
	deadline time.Time
}

func (w *boundedWriter) Write(p []byte) (int, error) {
	switch {
	case w.buf.Len()+len(p) > maxRendered:
		return 0, fmt.Errorf("it renders more than %d bytes", maxRendered)
	case time.Now().After(w.deadline):
		return 0, errSlow()
	}
	return w.buf.Write(p)
}

// render executes t on data within the bounds. A loop that writes
// nothing cannot be stopped from outside: it is answered errSlow at the
// deadline and left to end on its own (the drill refuses the scenario
// and exits meanwhile).
func render(t *template.Template, data any) ([]byte, error) {
	w := &boundedWriter{deadline: time.Now().Add(renderTimeout)}
	done := make(chan error, 1)
	go func() { done <- t.Execute(w, data) }()
	timer := time.NewTimer(renderTimeout + 100*time.Millisecond)
	defer timer.Stop()
	select {
	case err := <-done:
		if err != nil {
			return nil, err
		}
		return w.buf.Bytes(), nil
	case <-timer.C:
		return nil, errSlow()
	}
}
