package webui

import "github.com/idemgate/idemgate/audit"

// part is a piece of a timeline sentence: plain words, a name (a
// principal or an actor, drawn strong) or a value (a run, a key, drawn as
// code). The template escapes each, so a name is never markup.
type part struct {
	Text string
	As   string // "", "who" or "code"
}

// titles of the kinds that are not the operation's own steps: a locked
// event on the holder's timeline is another request's refusal, not the
// holder's lock.
var kindTitles = map[audit.Kind]string{
	audit.Locked:            "another request refused",
	audit.Conflict:          "another request refused",
	audit.Duplicate:         "another key answered",
	audit.ApprovalRequested: "approval requested",
	audit.ApprovalExpired:   "approval expired",
	audit.AnswerUnrecorded:  "answer not recorded",
}

// kindTitle is what the timeline calls e's kind.
func kindTitle(k audit.Kind) string {
	if t, ok := kindTitles[k]; ok {
		return t
	}
	return string(k)
}

// say tells in words who did what in e: who decided and who asked, whose
// request was refused and why, who recorded a step, rather than "by alice
// · principal bot".
func say(e audit.Event) []part {
	switch e.Kind {
	case audit.ApprovalRequested:
		return append(asked(e), part{Text: "; it waits for an approver."})
	case audit.Approved, audit.Denied:
		return append([]part{{e.Actor, "who"}, {Text: " decided: " + string(e.Kind) + ". "}}, asked(e)...)
	case audit.ApprovalExpired:
		return append([]part{{Text: "Nobody decided in time. "}}, asked(e)...)
	case audit.Resolved:
		return append([]part{{e.Actor, "who"}, {Text: " resolved it. "}}, asked(e)...)
	case audit.Locked:
		return another(e, "Another request was refused: ",
			", while this operation holds its concurrency group. This operation did not change.")
	case audit.Conflict:
		return another(e, "A request under this key with another fingerprint was refused: ",
			". This operation did not change.")
	case audit.Duplicate:
		return another(e, "A request under another key, with this operation's business identity, was answered from it: ", ".")
	case audit.Replayed:
		return append([]part{{Text: "A retry got the stored answer: "}}, asked(e)...)
	case audit.Received:
		return asked(e)
	}
	return recorded(e)
}

// asked is "bot asked, in run R".
func asked(e audit.Event) []part {
	if e.Principal == "" {
		return nil
	}
	out := []part{{e.Principal, "who"}, {Text: " asked"}}
	if e.RunID != "" {
		out = append(out, part{Text: ", in run "}, part{e.RunID, "code"})
	}
	return out
}

// another is the sentence of another request's event: whose it was,
// under which key, and what became of it.
func another(e audit.Event, lead, tail string) []part {
	out := append([]part{{Text: lead}}, asked(e)...)
	if e.Key != "" {
		out = append(out, part{Text: ", under key "}, part{e.Key, "code"})
	}
	return append(out, part{Text: tail})
}

// recorded is a step of the operation: for whose request, and who
// recorded it (a gateway, the lease sweep, the reconciler).
func recorded(e audit.Event) []part {
	var out []part
	if e.Principal != "" {
		out = append(out, part{Text: "For "}, part{e.Principal, "who"})
		if e.RunID != "" {
			out = append(out, part{Text: ", in run "}, part{e.RunID, "code"})
		}
	}
	if e.Actor != "" {
		if len(out) > 0 {
			out = append(out, part{Text: "; "})
		}
		out = append(out, part{Text: "recorded by "}, part{e.Actor, "who"})
	}
	return out
}
