package testenv

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"testing"
)

// Cluster is a PostgreSQL server of the test's own (initdb in a temporary
// directory, its own port, trust auth), for the drills that stop a server:
// the shared one is never stopped.
type Cluster struct {
	Dir  string
	Port int
	DSN  string // postgres://postgres@127.0.0.1:PORT/postgres?sslmode=disable
	bin  string
	tb   testing.TB
}

// PrivatePostgres makes and starts a cluster, stopped at the test's end.
// It needs the server binaries and, when run as root, the postgres user
// (the server refuses to run as root).
func PrivatePostgres(tb testing.TB) *Cluster {
	tb.Helper()
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(bins) == 0 {
		unavailable(tb, "no PostgreSQL server binaries under /usr/lib/postgresql")
	}
	// Not under tb.TempDir: the server's user must be able to reach it.
	dir, err := os.MkdirTemp("", "idemgate-pg-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	c := &Cluster{Dir: dir, Port: freePort(tb), bin: filepath.Dir(bins[len(bins)-1]), tb: tb}
	c.DSN = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.Port)
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			unavailable(tb, "running as root without a postgres user: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			tb.Fatal(err)
		}
	}
	c.run("initdb", "-D", c.Dir, "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8")
	c.Start()
	tb.Cleanup(func() { _ = c.pgctl("stop", "-m", "immediate") })
	return c
}

// Start starts the server and waits until it accepts connections.
func (c *Cluster) Start() {
	c.tb.Helper()
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=on -c synchronous_commit=on", c.Port, c.Dir)
	if err := c.pgctl("start", "-w", "-t", "60", "-l", filepath.Join(c.Dir, "log"), "-o", opts); err != nil {
		log, _ := os.ReadFile(filepath.Join(c.Dir, "log"))
		c.tb.Fatalf("start the private PostgreSQL: %v\n%s", err, log)
	}
}

// Crash stops the server at once, as a power cut would leave it: no
// checkpoint, no goodbye to clients (pg_ctl stop -m immediate).
func (c *Cluster) Crash() {
	c.tb.Helper()
	if err := c.pgctl("stop", "-m", "immediate", "-w"); err != nil {
		c.tb.Fatalf("stop the private PostgreSQL: %v", err)
	}
}

func (c *Cluster) pgctl(args ...string) error {
	out, err := c.command("pg_ctl", append([]string{"-D", c.Dir}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_ctl %v: %w: %s", args, err, out)
	}
	return nil
}

func (c *Cluster) run(name string, args ...string) {
	c.tb.Helper()
	if out, err := c.command(name, args...).CombinedOutput(); err != nil {
		c.tb.Fatalf("%s: %v: %s", name, err, out)
	}
}

// command runs a server binary, as the postgres user when this is root.
func (c *Cluster) command(name string, args ...string) *exec.Cmd {
	path := filepath.Join(c.bin, name)
	if os.Geteuid() == 0 {
		return exec.Command("runuser", append([]string{"-u", "postgres", "--", path}, args...)...)
	}
	return exec.Command(path, args...)
}

// freePort returns a local TCP port nothing listens on now.
func freePort(tb testing.TB) int {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
