package agent

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
)

// BenchmarkDo measures what the journal costs an agent per write: a new
// intent sent once (Do), against the same POST sent by hand (raw), both
// to a gateway stand-in that answers 201 at once.
func BenchmarkDo(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(201)
	}))
	defer srv.Close()
	body := []byte(`{"project":"OPS","title":"Disk full","priority":2}`)
	hc := &http.Client{}
	b.Run("raw", func(b *testing.B) {
		for b.Loop() {
			req, _ := http.NewRequest("POST", srv.URL+"/v1/tickets", bytes.NewReader(body))
			req.Header.Set("Idempotency-Key", newKey())
			resp, err := hc.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			resp.Body.Close()
		}
	})
	b.Run("journal", func(b *testing.B) {
		j, err := OpenJournal(context.Background(), filepath.Join(b.TempDir(), "journal.db"))
		if err != nil {
			b.Fatal(err)
		}
		defer j.Close()
		c := &Client{BaseURL: srv.URL, Token: "t", Journal: j, HTTP: hc}
		n := 0
		for b.Loop() {
			n++
			out, err := c.Do(context.Background(), Action{Intent: fmt.Sprint("bench-", n), Method: "POST",
				Path: "/v1/tickets", Body: body})
			if err != nil || out.Kind != Created {
				b.Fatal(out, err)
			}
		}
	})
}
