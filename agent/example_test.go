package agent_test

import (
	"context"
	"fmt"
	"os"

	"github.com/idemgate/idemgate/agent"
)

// Example is the guide's ten lines: one intent, sent through a gateway,
// resumable after any failure by running it again, its key derived from
// the agent's secret so that even a lost journal resumes it.
func Example() {
	ctx := context.Background()
	j, err := agent.OpenJournal(ctx, "journal.db")
	if err != nil {
		return
	}
	defer j.Close()
	secret, err := agent.LoadSecret("") // as idemgate call finds it: keys that outlive the journal
	if err != nil {
		return
	}
	keys, err := agent.NewKeys(secret, "")
	if err != nil {
		return
	}
	c := &agent.Client{BaseURL: "http://127.0.0.1:8080", Token: os.Getenv("IDEMGATE_TOKEN"), Journal: j, Keys: keys}
	out, err := c.Do(ctx, agent.Action{Intent: "task-42/create-ticket", Method: "POST",
		Path: "/v1/tickets", Body: []byte(`{"project":"OPS","title":"Disk full","priority":2}`)})
	if err != nil {
		return // refused locally (e.g. a changed payload): nothing was sent
	}
	if out.Kind == agent.Unknown {
		fmt.Println("reconcile", out.OperationID, "before anything else")
	}
}
