package fingerprint

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"mime"
	"strings"
)

// Media types ParseBody reads; any other needs BodyOptions.Opaque.
const (
	MediaJSON = "application/json"
	MediaForm = "application/x-www-form-urlencoded"
)

// accepted is said in every refusal, so that a client learns what to send.
const accepted = "accepted: application/json, */*+json, application/x-www-form-urlencoded"

// BodyOptions say how a route takes its request bodies.
type BodyOptions struct {
	Limits Limits // size and depth, for every body
	// Opaque is a route that declares `body: opaque`: a body of any media
	// type is taken as it is, and its command is {"sha256": hex of the raw
	// bytes, "type": media type}, so the exact bytes are bound to the key.
	Opaque bool
}

// ParseBody returns the command a request body becomes, the value that
// Request.Command fingerprints, by its Content-Type header:
//
//   - no bytes (and, for JSON, only whitespace) is a nil command, whatever
//     the type;
//   - application/json and any */*+json (application/problem+json): Parse;
//   - application/x-www-form-urlencoded: ParseForm;
//   - with opts.Opaque, any media type: {"sha256": "<hex>", "type": "<type>"},
//     the type lower-case without its parameters, application/octet-stream
//     when the header is missing (RFC 9110, section 8.3).
//
// A charset other than utf-8 (case-insensitive) on a JSON or form body, a
// missing or unreadable Content-Type, or any other media type on a route
// that is not opaque is an error wrapping ErrUnsupportedMediaType that says
// what was sent and what is accepted. Bodies over opts.Limits.MaxBytes are
// ErrTooLarge.
func ParseBody(contentType string, data []byte, opts BodyOptions) (any, error) {
	limits := opts.Limits.withDefaults()
	if len(data) == 0 {
		return nil, nil
	}
	if len(data) > limits.MaxBytes {
		return nil, &Error{Kind: ErrTooLarge, Offset: limits.MaxBytes,
			Detail: fmt.Sprintf("%d bytes, limit %d", len(data), limits.MaxBytes)}
	}
	mediaType, params, err := mediaTypeOf(contentType, opts.Opaque)
	if err != nil {
		return nil, err
	}
	if opts.Opaque {
		sum := sha256.Sum256(data)
		return map[string]any{"sha256": hex.EncodeToString(sum[:]), "type": mediaType}, nil
	}
	isJSON := isJSONType(mediaType)
	if !isJSON && mediaType != MediaForm {
		return nil, fmt.Errorf("%w: %s was sent; %s", ErrUnsupportedMediaType, shorten(mediaType), accepted)
	}
	if charset, ok := params["charset"]; ok && !strings.EqualFold(charset, "utf-8") {
		return nil, fmt.Errorf("%w: %s with charset %q was sent; accepted: charset utf-8 only",
			ErrUnsupportedMediaType, mediaType, shorten(charset))
	}
	if !isJSON {
		form, err := ParseForm(data, limits)
		if err != nil {
			return nil, err // not a nil map in a non-nil any
		}
		return form, nil
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, nil
	}
	return Parse(data, limits)
}

// mediaTypeOf reads a Content-Type header into its lower-case media type
// and its parameters. An opaque route takes a body without one.
func mediaTypeOf(contentType string, opaque bool) (string, map[string]string, error) {
	if strings.TrimSpace(contentType) == "" {
		if opaque {
			return "application/octet-stream", nil, nil
		}
		return "", nil, fmt.Errorf("%w: a body without Content-Type was sent; %s", ErrUnsupportedMediaType, accepted)
	}
	accepts := accepted
	if opaque {
		accepts = "accepted: any media type"
	}
	mediaType, params, err := mime.ParseMediaType(contentType)
	if err == nil && !strings.Contains(mediaType, "/") {
		err = errors.New("no subtype")
	}
	if err != nil {
		return "", nil, fmt.Errorf("%w: Content-Type %q cannot be read (%v); %s", ErrUnsupportedMediaType,
			shorten(contentType), err, accepts)
	}
	return mediaType, params, nil
}

// isJSONType reports application/json and the structured syntax suffix
// +json of RFC 6839 (application/problem+json, application/vnd.api+json).
func isJSONType(mediaType string) bool {
	if mediaType == MediaJSON {
		return true
	}
	_, subtype, _ := strings.Cut(mediaType, "/")
	return len(subtype) > len("+json") && strings.HasSuffix(subtype, "+json")
}
