// Package tapclient calls the tap service's aggregated API
// (tap.plexus.dev/v1alpha1) through the Kubernetes API server, with the
// caller's own credentials: the API server and the tap service authorize
// the call (verb watch on <resource>/tap), so a user without that right
// gets 403 from the API server.
package tapclient

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"k8s.io/client-go/rest"

	"github.com/plexus-mesh/plexus/mesh/api/tapapi"
)

// MaxLine bounds one event line of the answer.
const MaxLine = 1 << 20

// Stream taps resource/name in ns (resource "namespaces": the whole
// namespace) and calls fn with each event until ctx ends, the tap's limit
// is reached (nil) or fn returns an error (returned).
func Stream(ctx context.Context, cfg *rest.Config, ns, resource, name string, req tapapi.Request, fn func(tapapi.Event) error) error {
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = 0 // a tap streams for as long as the caller wants
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return fmt.Errorf("tap: %w", err)
	}
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	url := strings.TrimSuffix(cfg.Host, "/") + cfg.APIPath + tapapi.Path(ns, resource, name)
	if !strings.HasPrefix(url, "http") {
		url = "https://" + url
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("tap: %w", err)
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Accept", "application/x-ndjson")
	res, err := hc.Do(hr)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("tap: %w", err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return statusError(res)
	}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), MaxLine)
	for sc.Scan() {
		var ev tapapi.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return fmt.Errorf("tap: malformed event from the tap service: %w", err)
		}
		if err := fn(ev); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil && ctx.Err() == nil {
		return fmt.Errorf("tap: reading events: %w", err)
	}
	return nil
}

// Error is a refused tap: the HTTP status and the reason the API server or
// the tap service gave.
type Error struct {
	Status  int
	Message string
}

func (e *Error) Error() string { return fmt.Sprintf("tap refused (%d): %s", e.Status, e.Message) }

// IsForbidden reports a tap the caller is not authorized for.
func IsForbidden(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Status == http.StatusForbidden
}

// statusError reads an error answer: a Kubernetes Status object when it
// is one, else the text.
func statusError(res *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	var st struct {
		Message string `json:"message"`
	}
	msg := strings.TrimSpace(string(b))
	if json.Unmarshal(b, &st) == nil && st.Message != "" {
		msg = st.Message
	}
	if res.StatusCode == http.StatusNotFound && msg == "" || strings.Contains(msg, "the server could not find the requested resource") {
		msg = "the tap API is not served: is plexus-viz installed (plexusctl viz install)? " + msg
	}
	return &Error{Status: res.StatusCode, Message: msg}
}
