// A Temporal workflow whose activity's effect is an idemgate action. The
// activity's first attempt sends the reply and then fails before it
// returns; Temporal retries it, and the retry gets the recorded result:
// replies.txt holds one reply, however often the workflow runs.
//
//	idemgate serve --config examples/durable/gateway.yaml   # from the repository's root
//	cd examples/durable && go run ./temporal                # twice: still one reply
//
// By default the workflow runs in the Temporal SDK's in-process test
// environment, so that nothing but idemgate is needed; with -temporal
// HOST:PORT (a server, e.g. temporal server start-dev's 127.0.0.1:7233) a
// worker runs it there. IDEMGATE_URL, IDEMGATE_TOKEN as for the DBOS
// example.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"go.temporal.io/sdk/activity"
	tclient "go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/idemgate/idemgate/control/client"
	"github.com/idemgate/idemgate/examples/durable"
	"github.com/idemgate/idemgate/integrations/temporal"
)

const queue = "replies"

// SendReply appends the reply as the action support.reply.send, then, on
// its first attempt, fails as a worker would after the effect.
func SendReply(ctx context.Context, t durable.Ticket) (durable.Sent, error) {
	sent, err := idemtemporal.Perform(ctx, idemtemporal.Action{Name: "support.reply.send", Command: t},
		func(context.Context) (durable.Sent, error) { return durable.Append(t) })
	if err == nil && activity.GetInfo(ctx).Attempt == 1 {
		return durable.Sent{}, errors.New("the worker failed after the effect")
	}
	return sent, err
}

// Reply runs SendReply under the activity id "send-reply": its key is the
// workflow's id and that id. Execute waits for an operator when the
// outcome is unknown, or for an approver.
func Reply(ctx workflow.Context, t durable.Ticket) (durable.Sent, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 5}})
	var sent durable.Sent
	err := idemtemporal.Execute(ctx, "send-reply", idemtemporal.Wait{Poll: 10 * time.Second}, &sent, SendReply, t)
	return sent, err
}

func main() {
	server := flag.String("temporal", "", "a Temporal server's HOST:PORT (default: the SDK's in-process test environment)")
	flag.Parse()
	gw, err := client.New(durable.Env("IDEMGATE_URL", "http://127.0.0.1:8080"), durable.Env("IDEMGATE_TOKEN", "worker-demo-token"))
	if err == nil {
		var sent durable.Sent
		if *server == "" {
			sent, err = inProcess(gw)
		} else {
			sent, err = onServer(gw, *server)
		}
		if err == nil {
			fmt.Printf("workflow reply-584-v3: reply on line %d; %s holds %d replies\n", sent.Line, durable.File, durable.Lines())
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func inProcess(gw *client.Client) (durable.Sent, error) {
	var s testsuite.WorkflowTestSuite
	s.SetLogger(log.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	env := s.NewTestWorkflowEnvironment()
	env.SetTestTimeout(time.Minute)
	env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{idemtemporal.NewInterceptor(gw)}})
	env.SetStartWorkflowOptions(tclient.StartWorkflowOptions{ID: "reply-584-v3", TaskQueue: queue})
	env.RegisterActivity(SendReply)
	idemtemporal.Register(env)
	env.ExecuteWorkflow(Reply, durable.Ticket{ID: "584", Version: 3})
	var sent durable.Sent
	if err := env.GetWorkflowError(); err != nil {
		return sent, err
	}
	return sent, env.GetWorkflowResult(&sent)
}

func onServer(gw *client.Client, hostPort string) (durable.Sent, error) {
	var sent durable.Sent
	tc, err := tclient.Dial(tclient.Options{HostPort: hostPort})
	if err != nil {
		return sent, err
	}
	defer tc.Close()
	w := worker.New(tc, queue, worker.Options{Interceptors: []interceptor.WorkerInterceptor{idemtemporal.NewInterceptor(gw)}})
	w.RegisterWorkflow(Reply)
	w.RegisterActivity(SendReply)
	idemtemporal.Register(w)
	if err := w.Start(); err != nil {
		return sent, err
	}
	defer w.Stop()
	run, err := tc.ExecuteWorkflow(context.Background(), tclient.StartWorkflowOptions{ID: "reply-584-v3", TaskQueue: queue}, Reply,
		durable.Ticket{ID: "584", Version: 3})
	if err != nil {
		return sent, err
	}
	return sent, run.Get(context.Background(), &sent)
}
