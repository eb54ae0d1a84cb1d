package mcpproxy

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// stdioTransport runs a stdio server's command, as mcp.CommandTransport
// does, but reads its output through a lineGuard: one answer larger than
// the proxy reads ends its own call, not the session every caller shares
// (the SDK ends the whole session, and with it the process and every
// other call in flight).
type stdioTransport struct {
	cmd   *exec.Cmd
	limit int
}

// Connect implements mcp.Transport.
func (t *stdioTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	stdout, err := t.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stdin, err := t.cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := t.cmd.Start(); err != nil {
		return nil, err
	}
	// The guard hands on lines of at most limit bytes, and its stand-in
	// for a larger one is short: the SDK's own bound is never reached.
	io := &mcp.IOTransport{Reader: io.NopCloser(newLineGuard(stdout, t.limit)),
		Writer: &process{cmd: t.cmd, stdin: stdin}, MaxLineLength: t.limit + 1<<10}
	return io.Connect(ctx)
}

// process is a stdio server's input; closing it ends the process as the
// MCP specification says: stdin closed, then SIGTERM, then SIGKILL.
type process struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

func (p *process) Write(b []byte) (int, error) { return p.stdin.Write(b) }

// Close implements io.Closer.
func (p *process) Close() error {
	_ = p.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	for _, stop := range []func() error{
		func() error { return nil },
		func() error { return p.cmd.Process.Signal(syscall.SIGTERM) },
		p.cmd.Process.Kill,
	} {
		if stop() != nil {
			continue
		}
		select {
		case err := <-done:
			return err
		case <-time.After(time.Second):
		}
	}
	return errors.New("the MCP server's process did not exit")
}

// lineGuard hands on a stdio server's output line by line; a line over
// limit bytes is read to its end without being kept, and stands as
// tooLarge for the call it answered (its top-level "id", found as it
// streams by).
type lineGuard struct {
	handOn
	br    *bufio.Reader
	limit int
	line  []byte
}

func newLineGuard(r io.Reader, limit int) *lineGuard {
	g := &lineGuard{br: bufio.NewReaderSize(r, 64<<10), limit: limit}
	g.fill = g.next
	return g
}

// next reads one line into out.
func (g *lineGuard) next() {
	g.line = g.line[:0]
	for {
		chunk, err := g.br.ReadSlice('\n')
		if len(g.line)+len(chunk) > g.limit {
			g.out = g.skip(chunk, err)
			return
		}
		g.line = append(g.line, chunk...)
		if !errors.Is(err, bufio.ErrBufferFull) {
			g.out, g.err = g.line, err
			if cap(g.line) > 1<<20 { // a large line's buffer is not kept
				g.line = nil
			}
			return
		}
	}
}

// skip reads the rest of an oversized line, only to find its id, and is
// the stand-in for it (nothing when it has no id to answer).
func (g *lineGuard) skip(chunk []byte, err error) []byte {
	var s idScanner
	s.scan(g.line)
	g.line = nil
	for s.scan(chunk); errors.Is(err, bufio.ErrBufferFull); s.scan(chunk) {
		chunk, err = g.br.ReadSlice('\n')
	}
	g.err = err
	if !json.Valid(s.id) {
		return []byte("\n") // an empty line: no answer to stand for
	}
	return append(tooLarge(s.id, g.limit), '\n')
}

// idScanner finds the top-level "id" of a JSON object as its bytes
// stream by, keeping none of the rest (a JSON-RPC id is a string or a
// number).
type idScanner struct {
	depth                int
	inString, esc        bool
	wantKey, inKey, inID bool
	key, id              []byte
}

func (s *idScanner) scan(b []byte) {
	for _, c := range b {
		s.byte(c)
	}
}

func (s *idScanner) byte(c byte) {
	if s.inString {
		s.stringByte(c)
		return
	}
	if s.inID && s.depth == 1 {
		switch {
		case c == ',' || c == '}':
			s.inID = false
		case c == '"':
			s.inString, s.id = true, append(s.id, c)
			return
		case c > ' ':
			s.keep(c)
			return
		}
	}
	switch c {
	case '"':
		s.inString = true
		if s.depth == 1 && s.wantKey {
			s.inKey, s.wantKey, s.key = true, false, s.key[:0]
		}
	case '{', '[':
		s.depth++
		if s.depth == 1 {
			s.wantKey = c == '{'
		}
	case '}', ']':
		s.depth--
	case ':':
		if s.depth == 1 && string(s.key) == "id" && s.id == nil {
			s.inID, s.id = true, []byte{}
		}
	case ',':
		if s.depth == 1 {
			s.wantKey = true
		}
	}
}

func (s *idScanner) stringByte(c byte) {
	switch {
	case s.esc:
		s.esc = false
	case c == '\\':
		s.esc = true
	case c == '"':
		s.inString = false
		if s.inKey {
			s.inKey = false
			return
		}
	}
	switch {
	case s.inKey && len(s.key) < 8:
		s.key = append(s.key, c)
	case s.inID:
		s.keep(c)
	}
}

// keep notes a byte of the id; a longer id than any real one is not kept.
func (s *idScanner) keep(c byte) {
	if len(s.id) < 256 {
		s.id = append(s.id, c)
	}
}
