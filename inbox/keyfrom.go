package inbox

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/idemgate/idemgate/internal/jsonptr"
)

// KeyFrom says where a message's identity is: a header, the broker's
// message id (AMQP's message_id), or a JSON Pointer into the body.
type KeyFrom struct {
	header    string
	messageID bool
	pointer   []string
	text      string
}

// ParseKeyFrom reads a consumer's key_from: "header:NAME", "message_id"
// or "body:/pointer".
func ParseKeyFrom(s string) (KeyFrom, error) {
	kind, ref, _ := strings.Cut(s, ":")
	k := KeyFrom{text: s}
	switch {
	case s == "message_id":
		k.messageID = true
	case kind == "header" && ref != "" && !strings.ContainsAny(ref, " \t\r\n:"):
		k.header = ref
	case kind == "body":
		toks, err := jsonptr.Parse(ref)
		if err != nil || len(toks) == 0 {
			return KeyFrom{}, fmt.Errorf("key_from %q: want body:/pointer", s)
		}
		k.pointer = toks
	default:
		return KeyFrom{}, fmt.Errorf("key_from %q: want header:NAME, message_id or body:/pointer", s)
	}
	return k, nil
}

// String is the key_from as written.
func (k KeyFrom) String() string { return k.text }

// Of is m's identity, and false when m has none: an empty header or id,
// a body that is not JSON, or a pointer to nothing, to an object or to a
// list. A number is its text as written.
func (k KeyFrom) Of(m Message) (string, bool) {
	var key string
	switch {
	case k.messageID:
		key = m.MessageID
	case k.header != "":
		key = m.Get(k.header)
	case k.pointer != nil:
		key = bodyKey(m.Body, k.pointer)
	}
	return key, key != ""
}

// bodyKey is the string or number the pointer names in a JSON body.
func bodyKey(body []byte, ptr []string) string {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var doc any
	if dec.Decode(&doc) != nil {
		return ""
	}
	switch v, _ := jsonptr.Get(doc, ptr); v := v.(type) {
	case string:
		return v
	case json.Number:
		return v.String()
	}
	return ""
}
