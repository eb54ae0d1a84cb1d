package testenv

import (
	"cmp"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// NATSURL is the shared NATS server with JetStream the tests use:
// IDEMGATE_TEST_NATS, or nats://127.0.0.1:4222.
func NATSURL() string { return cmp.Or(os.Getenv("IDEMGATE_TEST_NATS"), "nats://127.0.0.1:4222") }

// AMQPURL is the shared RabbitMQ the tests use: IDEMGATE_TEST_AMQP, or
// amqp://guest:guest@127.0.0.1:5672/.
func AMQPURL() string {
	return cmp.Or(os.Getenv("IDEMGATE_TEST_AMQP"), "amqp://guest:guest@127.0.0.1:5672/")
}

// RequireNATS skips the test, or fails it under CI, when the NATS server
// does not accept connections. Each test makes its own stream, deleted at
// its end, and never stops this server (PrivateNATS is for that).
func RequireNATS(tb testing.TB) string {
	tb.Helper()
	requireBroker(tb, "NATS", NATSURL())
	return NATSURL()
}

// RequireAMQP is RequireNATS for RabbitMQ.
func RequireAMQP(tb testing.TB) string {
	tb.Helper()
	requireBroker(tb, "RabbitMQ", AMQPURL())
	return AMQPURL()
}

func requireBroker(tb testing.TB, name, raw string) {
	tb.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		tb.Fatalf("%s URL %q: %v", name, raw, err)
	}
	c, err := net.DialTimeout("tcp", u.Host, 2*time.Second)
	if err != nil {
		unavailable(tb, "%s is unreachable at %s: %v (start it, or set IDEMGATE_TEST_%s)", name, u.Host, err,
			map[string]string{"NATS": "NATS", "RabbitMQ": "AMQP"}[name])
		return
	}
	c.Close()
}

// NATSServer is a nats-server of the test's own (its own port and data
// directory, JetStream on), for the tests that stop a broker: the shared
// one is never stopped.
type NATSServer struct {
	URL  string
	Port int
	Dir  string
	cmd  *exec.Cmd
	tb   testing.TB
}

// PrivateNATS starts a nats-server, stopped at the test's end.
func PrivateNATS(tb testing.TB) *NATSServer {
	tb.Helper()
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/nats-server"); serr != nil {
			unavailable(tb, "no nats-server binary: %v", err)
			return nil
		}
		bin = "/usr/sbin/nats-server"
	}
	s := &NATSServer{Dir: tb.TempDir(), Port: freePort(tb), tb: tb}
	s.URL = fmt.Sprintf("nats://127.0.0.1:%d", s.Port)
	s.cmd = exec.Command(bin)
	s.Start()
	tb.Cleanup(s.Stop)
	return s
}

// Start starts the server (again, on the same data) and waits until it
// accepts connections.
func (s *NATSServer) Start() {
	s.tb.Helper()
	s.cmd = exec.Command(s.cmd.Path, "-a", "127.0.0.1", "-p", fmt.Sprint(s.Port), "-js", "-sd",
		filepath.Join(s.Dir, "js"), "-l", filepath.Join(s.Dir, "log"))
	if err := s.cmd.Start(); err != nil {
		s.tb.Fatalf("start nats-server: %v", err)
	}
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", s.Port)); err == nil {
			c.Close()
			return
		}
	}
	s.tb.Fatalf("nats-server did not listen on %d", s.Port)
}

// Stop stops the server (SIGTERM, as an operator's restart does) and
// waits for it to exit; a second call does nothing.
func (s *NATSServer) Stop() {
	if s.cmd == nil || s.cmd.Process == nil || s.cmd.ProcessState != nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	_ = s.cmd.Wait()
}

// CloseAMQPConnection has RabbitMQ close the connection whose client
// properties hold named (a consumer names its connection after its
// queue), as a broker restart would: the shared broker is never
// restarted. It needs rabbitmqctl, and fails the test without it.
func CloseAMQPConnection(tb testing.TB, named string) {
	tb.Helper()
	out, err := exec.Command("rabbitmqctl", "list_connections", "-q", "pid", "client_properties").Output()
	if err != nil {
		tb.Fatalf("rabbitmqctl: %v", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if pid, _, ok := strings.Cut(line, "\t"); ok && strings.Contains(line, named) {
			if err := exec.Command("rabbitmqctl", "close_connection", pid, "the test's broker restart").Run(); err != nil {
				tb.Fatalf("rabbitmqctl close_connection: %v", err)
			}
			return
		}
	}
	tb.Fatalf("no connection named %q in %s", named, out)
}
