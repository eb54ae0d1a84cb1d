package opsapi

import (
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// faults are what POST /_faults arms (only with Options.Faults): each
// counter applies to the next writes, then disarms itself.
type faults struct {
	mu          sync.Mutex
	dropAfter   int // commit, then cut the connection without answering
	failBefore  int // roll back, answer 500
	delay       time.Duration
	statusCode  int
	statusCount int
	// hold is how many of the next writes are held in flight (counted in
	// inFlight, nothing applied, nothing answered) until a release; held
	// is what they wait on, closed by the release.
	hold     int
	held     chan struct{}
	inFlight atomic.Int64 // writes being performed now, for drills to wait on
}

// faultRequest is the body of POST /_faults; absent members leave their
// fault as it is.
type faultRequest struct {
	DropResponseAfterCommit *int `json:"drop_response_after_commit"`
	DelayMS                 *int `json:"delay_ms"`
	FailBeforeCommit        *int `json:"fail_before_commit"`
	Status                  *struct {
		Code  int `json:"code"`
		Count int `json:"count"`
	} `json:"status"`
	// Hold holds the next writes in flight until a release: a drill kills
	// or sends what it means to while a write is surely at the API,
	// whatever the machine's load, instead of within a delay.
	Hold *int `json:"hold"`
	// Release lets the writes held now go on, and holds no more.
	Release bool `json:"release"`
}

// getFaults shows the armed faults and the writes in flight.
func (s *Server) getFaults(w http.ResponseWriter, r *http.Request) {
	if !s.opts.Faults {
		answer(w, http.StatusForbidden, map[string]string{"error": "fault injection is off; start with --faults"})
		return
	}
	f := s.faults
	f.mu.Lock()
	defer f.mu.Unlock()
	answer(w, http.StatusOK, f.view())
}

func (f *faults) view() map[string]any {
	return map[string]any{"drop_response_after_commit": f.dropAfter, "fail_before_commit": f.failBefore,
		"delay_ms": f.delay.Milliseconds(), "status": map[string]int{"code": f.statusCode, "count": f.statusCount},
		"hold": f.hold, "in_flight": f.inFlight.Load()}
}

func (s *Server) setFaults(w http.ResponseWriter, r *http.Request) {
	if !s.opts.Faults {
		answer(w, http.StatusForbidden, map[string]string{"error": "fault injection is off; start with --faults"})
		return
	}
	var req faultRequest
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		answer(w, http.StatusUnprocessableEntity, map[string]string{"error": err.Error()})
		return
	}
	f := s.faults
	f.mu.Lock()
	defer f.mu.Unlock()
	if req.DropResponseAfterCommit != nil {
		f.dropAfter = *req.DropResponseAfterCommit
	}
	if req.FailBeforeCommit != nil {
		f.failBefore = *req.FailBeforeCommit
	}
	if req.DelayMS != nil {
		f.delay = time.Duration(*req.DelayMS) * time.Millisecond
	}
	if req.Status != nil {
		f.statusCode, f.statusCount = req.Status.Code, req.Status.Count
	}
	if req.Hold != nil {
		f.hold = *req.Hold
	}
	if req.Release {
		f.hold = 0
		if f.held != nil {
			close(f.held)
			f.held = nil
		}
	}
	answer(w, http.StatusOK, f.view())
}

// before holds the write if a hold is armed, then applies the delay and
// a forced status; true means it answered.
func (f *faults) before(w http.ResponseWriter) bool {
	f.mu.Lock()
	var held chan struct{}
	if f.hold > 0 {
		f.hold--
		if f.held == nil {
			f.held = make(chan struct{})
		}
		held = f.held
	}
	f.mu.Unlock()
	if held != nil {
		<-held // past a caller who hung up meanwhile, as the delay is
	}
	f.mu.Lock()
	delay := f.delay
	code := 0
	if f.statusCount > 0 {
		code = f.statusCode
		f.statusCount--
	}
	f.mu.Unlock()
	time.Sleep(delay)
	if code == 0 {
		return false
	}
	if code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", strconv.Itoa(1))
	}
	answer(w, code, map[string]string{"error": "injected status " + strconv.Itoa(code)})
	return true
}

func (f *faults) take(counter *int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if *counter > 0 {
		*counter--
		return true
	}
	return false
}

func (f *faults) failBeforeCommit() bool { return f.take(&f.failBefore) }

// dropAfterCommit cuts the connection of a committed write: the effect is
// done, the answer never arrives.
func (f *faults) dropAfterCommit(w http.ResponseWriter) bool {
	if !f.take(&f.dropAfter) {
		return false
	}
	if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
		conn.Close()
	}
	return true
}
