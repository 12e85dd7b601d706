package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/plexus-mesh/plexus/control/component"
	"github.com/plexus-mesh/plexus/mesh/api/tapapi"
)

// errStreamClosed: a write after the handler returned.
var errStreamClosed = errors.New("the tap stream is closed")

// tapTarget is a tap's target and filter, read from the query string of
// the tap page and of its stream.
type tapTarget struct {
	Namespace, Resource, Name string
	Method, PathPrefix        string
	Authority, Direction      string
	// From and To are label selectors of the requests' sources and
	// destinations, pods in the tapped namespace.
	From, To string
}

// Directions offered by the filter.
var tapDirections = []string{"", "inbound", "outbound"}

func parseTapTarget(q url.Values) (tapTarget, error) {
	t := tapTarget{
		Namespace: q.Get("namespace"), Resource: q.Get("resource"), Name: q.Get("name"),
		Method: strings.ToUpper(q.Get("method")), PathPrefix: q.Get("path"), Direction: q.Get("direction"),
		Authority: q.Get("authority"), From: q.Get("from"), To: q.Get("to"),
	}
	if t.Resource == "" {
		t.Resource = "namespaces"
	}
	var errs []error
	if !validName(t.Namespace) {
		errs = append(errs, fmt.Errorf("namespace %q is not a namespace name", t.Namespace))
	}
	if !slices.Contains(tapapi.Resources, t.Resource) {
		errs = append(errs, fmt.Errorf("resource %q: want one of %s", t.Resource, strings.Join(tapapi.Resources, ", ")))
	}
	if t.Resource == "namespaces" {
		t.Name = ""
	} else if !validName(t.Name) {
		errs = append(errs, fmt.Errorf("name %q is not an object name", t.Name))
	}
	for i := 0; i < len(t.Method); i++ {
		if c := t.Method[i]; c < 'A' || c > 'Z' {
			errs = append(errs, fmt.Errorf("method %q is not an HTTP method", t.Method))
			break
		}
	}
	if t.PathPrefix != "" && !strings.HasPrefix(t.PathPrefix, "/") || len(t.PathPrefix) > tapapi.MaxFilterString {
		errs = append(errs, fmt.Errorf("path prefix %q: want a path starting with /", t.PathPrefix))
	}
	if !slices.Contains(tapDirections, t.Direction) {
		errs = append(errs, fmt.Errorf("direction %q: want inbound, outbound or empty", t.Direction))
	}
	if len(t.Authority) > tapapi.MaxFilterString || strings.ContainsAny(t.Authority, " /") {
		errs = append(errs, fmt.Errorf("authority %q: want a host or host:port", t.Authority))
	}
	for what, sel := range map[string]string{"from": t.From, "to": t.To} {
		if _, err := labels.Parse(sel); err != nil || len(sel) > tapapi.MaxFilterString {
			errs = append(errs, fmt.Errorf("%s %q: want a label selector (app=books,track!=canary)", what, sel))
		}
	}
	return t, errors.Join(errs...)
}

// Query is t as the query string of the tap page and stream.
func (t tapTarget) Query() string {
	q := url.Values{"namespace": {t.Namespace}, "resource": {t.Resource}}
	for k, v := range map[string]string{"name": t.Name, "method": t.Method, "path": t.PathPrefix, "direction": t.Direction,
		"authority": t.Authority, "from": t.From, "to": t.To} {
		if v != "" {
			q.Set(k, v)
		}
	}
	return q.Encode()
}

// request is the tap request of t at rate events per second.
func (t tapTarget) request(rate float64) tapapi.Request {
	r := tapapi.Request{Direction: t.Direction, Method: t.Method, PathPrefix: t.PathPrefix, Authority: t.Authority,
		MaxEventRate: rate, ToSelector: t.To, FromSelector: t.From}
	if t.To != "" {
		r.ToNamespace = t.Namespace
	}
	if t.From != "" {
		r.FromNamespace = t.Namespace
	}
	return r
}

type tapBody struct {
	Target     tapTarget
	Ready      bool // a valid target: the page starts the stream
	Resources  []string
	Directions []string
	MaxStreams int
}

func (s *Server) tapPage(w http.ResponseWriter, r *http.Request) {
	b := tapBody{Resources: tapapi.Resources, Directions: tapDirections, MaxStreams: s.cfg.MaxTapStreams}
	var errs []string
	t, err := parseTapTarget(r.URL.Query())
	b.Target = t
	switch {
	case r.URL.Query().Get("namespace") == "":
		// The empty form.
	case err != nil:
		errs = append(errs, err.Error())
	default:
		b.Ready = true
	}
	crumbs := []Crumb{{"Tap", ""}}
	if b.Ready {
		crumbs = []Crumb{{"Namespaces", "/"}, {t.Namespace, "/namespaces/" + t.Namespace}, {"tap", ""}}
	}
	s.render(w, "tap.html", page{Title: "Live tap", Nav: "tap", Errors: errs, Crumbs: crumbs, Body: b})
}

// tapStream serves a live tap as Server-Sent Events: "tap" events carry
// tapapi.Events as JSON; a final "end" event says why the stream ended
// (the page then closes it rather than reconnecting).
func (s *Server) tapStream(w http.ResponseWriter, r *http.Request) {
	t, err := parseTapTarget(r.URL.Query())
	if err != nil {
		http.Error(w, "400 bad request: "+err.Error(), http.StatusBadRequest)
		return
	}
	rc := http.NewResponseController(w)
	// A stream outlives the server's timeouts (its read timeout would
	// cancel the request's context).
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)

	var mu sync.Mutex
	closed := false // set when the handler returns: w is not ours after that
	defer func() { mu.Lock(); closed = true; mu.Unlock() }()
	// write sends one piece of the stream; a client that takes more than
	// 10 s to take it is gone.
	write := func(text string) error {
		mu.Lock()
		defer mu.Unlock()
		if closed {
			return errStreamClosed
		}
		_ = rc.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(w, text); err != nil {
			return err
		}
		return rc.Flush()
	}
	send := func(event string, v any) error {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		return write("event: " + event + "\ndata: " + string(b) + "\n\n")
	}
	select {
	case s.taps <- struct{}{}:
		defer func() { <-s.taps }()
	default:
		_ = send("end", map[string]string{"reason": fmt.Sprintf("too many live taps (at most %d at once); close another tap or try again later", s.cfg.MaxTapStreams)})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.TapMaxDuration)
	var keepalive sync.WaitGroup
	defer func() { cancel(); keepalive.Wait() }() // the keepalive never outlives the handler
	keepalive.Add(1)
	go func() { // comments keep proxies and the browser from timing the stream out
		defer keepalive.Done()
		component.Every(ctx, 15*time.Second, func(context.Context) {
			if write(": keepalive\n\n") != nil {
				cancel()
			}
		})
	}()
	_ = send("start", map[string]string{"target": t.Resource + "/" + t.Name, "namespace": t.Namespace})
	req := t.request(s.cfg.TapMaxEventRate)
	err = s.src.Tap(ctx, t.Namespace, t.Resource, t.Name, req, func(ev tapapi.Event) error { return send("tap", ev) })
	reason := "the tap ended"
	switch {
	case r.Context().Err() != nil:
		return // the browser left
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		reason = fmt.Sprintf("the tap ended after %s; reload to tap again", s.cfg.TapMaxDuration)
	case err != nil:
		reason = "the tap failed: " + err.Error()
		s.log.Info("tap failed", "namespace", t.Namespace, "resource", t.Resource, "name", t.Name, "err", err)
	}
	_ = send("end", map[string]string{"reason": reason})
}
