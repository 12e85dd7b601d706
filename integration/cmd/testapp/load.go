package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// headerList is the repeatable -H flag.
type headerList []string

func (h *headerList) String() string     { return strings.Join(*h, ", ") }
func (h *headerList) Set(v string) error { *h = append(*h, v); return nil }

// loadConfig is what `testapp load` was asked.
type loadConfig struct {
	n           int
	rate        float64
	duration    time.Duration
	concurrency int
	method      string
	headers     [][2]string
	body        string
	timeout     time.Duration
	timeline    bool
	grpc        bool
	newConn     bool // -new-conn
	target      string
	slow        time.Duration // -slow-threshold
	stopFile    string
	out         string
}

// Validate reports every problem of the flags.
func (c *loadConfig) Validate() error {
	var errs []error
	if c.rate > 0 && c.duration <= 0 {
		errs = append(errs, errors.New("-rate needs -duration"))
	}
	if c.rate <= 0 && c.n < 1 {
		errs = append(errs, errors.New("-n must be at least 1"))
	}
	if c.concurrency < 1 {
		errs = append(errs, errors.New("-c must be at least 1"))
	}
	if c.target == "" {
		errs = append(errs, errors.New("no URL (or HOST:PORT with -grpc)"))
	}
	if c.newConn && c.grpc {
		errs = append(errs, errors.New("-new-conn is for HTTP (gRPC multiplexes one connection)"))
	}
	return errors.Join(errs...)
}

func parseLoad(args []string) (*loadConfig, error) {
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	c := &loadConfig{}
	var headers headerList
	fs.IntVar(&c.n, "n", 1, "number of requests (without -rate)")
	fs.Float64Var(&c.rate, "rate", 0, "requests per second, for -duration (instead of -n); latency then counts from when each request was due")
	fs.DurationVar(&c.duration, "duration", 0, "how long to send at -rate")
	fs.IntVar(&c.concurrency, "c", 1, "concurrent workers; they share one keep-alive pool, whose idle connections are reused most recent first")
	fs.BoolVar(&c.newConn, "new-conn", false, "open a new connection for every request (keep-alive off), as a client without a pool does")
	fs.StringVar(&c.method, "X", http.MethodGet, "HTTP method")
	fs.Var(&headers, "H", "request header 'Name: value' (repeatable; Host sets the Host); {run}, {worker} and {i} are replaced")
	fs.StringVar(&c.body, "d", "", "request body")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "timeout of each request")
	fs.BoolVar(&c.timeline, "timeline", false, "add every request's start, latency, status and server to the summary")
	fs.BoolVar(&c.grpc, "grpc", false, "call grpc.health.v1.Health/Check on HOST:PORT instead of HTTP; headers are metadata")
	fs.DurationVar(&c.slow, "slow-threshold", 0, "report slow_share, the share of requests that took longer than this")
	fs.StringVar(&c.stopFile, "stop-file", "", "also stop sending once this file exists (testapp touch creates it)")
	fs.StringVar(&c.out, "out", "", "also write the summary to this file, before printing it")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() == 1 {
		c.target = fs.Arg(0)
	}
	var errs []error
	for _, h := range headers {
		name, value, ok := strings.Cut(h, ":")
		if !ok || strings.TrimSpace(name) == "" {
			errs = append(errs, fmt.Errorf("-H %q is not 'Name: value'", h))
			continue
		}
		c.headers = append(c.headers, [2]string{strings.TrimSpace(name), strings.TrimSpace(value)})
	}
	if !slices.ContainsFunc(c.headers, func(h [2]string) bool { return strings.EqualFold(h[0], requestIDHeader) }) {
		c.headers = append(c.headers, [2]string{requestIDHeader, "{run}-{i}"})
	}
	if c.slow < 0 {
		errs = append(errs, fmt.Errorf("-slow-threshold %v is negative", c.slow))
	}
	if fs.NArg() > 1 {
		errs = append(errs, fmt.Errorf("one target, not %d", fs.NArg()))
	}
	errs = append(errs, c.Validate())
	return c, errors.Join(errs...)
}

// requestIDHeader is the header that carries every request's id, unless
// -H sets it: {run}-{i}.
const requestIDHeader = "x-request-id"

// loadSummary is what `testapp load` prints, as JSON.
type loadSummary struct {
	Run      string         `json:"run"` // the {run} of this invocation
	Requests int            `json:"requests"`
	Seconds  float64        `json:"seconds"`
	Statuses map[string]int `json:"statuses"`
	Errors   map[string]int `json:"errors,omitempty"`
	Servers  map[string]int `json:"servers,omitempty"`
	Latency  struct {
		Min  float64 `json:"min"`
		P50  float64 `json:"p50"`
		P90  float64 `json:"p90"`
		P99  float64 `json:"p99"`
		P999 float64 `json:"p999"`
		Max  float64 `json:"max"`
	} `json:"latency_ms"`
	// SlowShare, with -slow-threshold, is the share of the requests that
	// took longer than the threshold (failed ones included).
	SlowShare *float64     `json:"slow_share,omitempty"`
	First     *firstAnswer `json:"first,omitempty"`
	Timeline  []sample     `json:"timeline,omitempty"`
}

// firstAnswer is the answer to request 0.
type firstAnswer struct {
	Status string              `json:"status"`
	Header map[string][]string `json:"header"`
	Body   string              `json:"body"`
}

// sample is one request of the timeline.
type sample struct {
	StartUnixNano int64   `json:"start_unix_nano"`
	MS            float64 `json:"ms"`
	Status        string  `json:"status"`
	Server        string  `json:"server,omitempty"`
	// ProxyError is the answer's plexus-proxy-error header (HTTP): a
	// proxy answered, and why.
	ProxyError string `json:"proxy_error,omitempty"`
	err        string
}

// maxErrorKinds bounds the distinct error texts a summary keeps.
const maxErrorKinds = 10

// load sends requests and prints a loadSummary.
func load(args []string) error {
	c, err := parseLoad(args)
	if err != nil {
		return err
	}
	runBytes := make([]byte, 4)
	rand.Read(runBytes)
	run := hex.EncodeToString(runBytes)
	send, first, closeFn, err := c.sender(run)
	if err != nil {
		return err
	}
	defer closeFn()
	stop := whenExists(c.stopFile)

	total, at := c.n, func(int) time.Duration { return 0 }
	if c.rate > 0 {
		total = int(c.rate * c.duration.Seconds())
		at = func(i int) time.Duration { return time.Duration(float64(i) / c.rate * float64(time.Second)) }
	}
	samples := make([]sample, total)
	work := make(chan int)
	done := make(chan struct{})
	start := time.Now()
	for w := range c.concurrency {
		go func() {
			for i := range work {
				samples[i] = send(w, i)
				if c.rate > 0 {
					// Open loop: a request sent late (every worker was
					// busy) counts its wait, from when it was due.
					late := samples[i].StartUnixNano - start.Add(at(i)).UnixNano()
					samples[i].MS += float64(max(late, 0)/1000) / 1000
				}
			}
			done <- struct{}{}
		}()
	}
	sent := dispatch(work, total, func(i int) time.Time { return start.Add(at(i)) }, stop)
	close(work)
	for range c.concurrency {
		<-done
	}
	s := summarize(samples[:sent], time.Since(start), c.timeline)
	s.Run, s.First = run, first()
	if c.slow > 0 {
		s.SlowShare = slowShare(samples[:sent], c.slow)
	}
	text, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	text = append(text, '\n')
	if c.out != "" {
		if err := writeFile(c.out, text); err != nil {
			return err
		}
	}
	_, err = os.Stdout.Write(text)
	return err
}

// dispatch hands requests 0 to total-1 to the workers, each at its time,
// until stop is closed; it returns how many it handed out.
func dispatch(work chan<- int, total int, at func(i int) time.Time, stop <-chan struct{}) int {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for i := range total {
		if d := time.Until(at(i)); d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-stop:
				return i
			}
		}
		select {
		case work <- i:
		case <-stop:
			return i
		}
	}
	return total
}

// slowShare is the share of samples that took longer than threshold.
func slowShare(samples []sample, threshold time.Duration) *float64 {
	share := 0.0
	if len(samples) > 0 {
		limit := float64(threshold.Microseconds()) / 1000
		slow := 0
		for _, x := range samples {
			if x.MS > limit {
				slow++
			}
		}
		share = float64(slow) / float64(len(samples))
	}
	return &share
}

func summarize(samples []sample, took time.Duration, timeline bool) *loadSummary {
	s := &loadSummary{Requests: len(samples), Seconds: took.Seconds(), Statuses: map[string]int{}, Servers: map[string]int{}, Errors: map[string]int{}}
	ms := make([]float64, 0, len(samples))
	for _, x := range samples {
		s.Statuses[x.Status]++
		if x.Server != "" {
			s.Servers[x.Server]++
		}
		if x.err != "" && (len(s.Errors) < maxErrorKinds || s.Errors[x.err] > 0) {
			s.Errors[x.err]++
		}
		ms = append(ms, x.MS)
	}
	slices.Sort(ms)
	if n := len(ms); n > 0 {
		rank := func(p float64) float64 { return ms[max(int(math.Ceil(p*float64(n)))-1, 0)] }
		s.Latency.Min, s.Latency.P50, s.Latency.P90, s.Latency.P99, s.Latency.P999, s.Latency.Max = ms[0], rank(0.5), rank(0.9), rank(0.99), rank(0.999), ms[n-1]
	}
	if timeline {
		s.Timeline = samples
	}
	return s
}

// sender returns the function that sends request i from worker w, the
// answer to request 0 once all are done, and what to close.
func (c *loadConfig) sender(run string) (send func(w, i int) sample, first func() *firstAnswer, closeFn func(), err error) {
	expand := func(s string, w, i int) string {
		return strings.NewReplacer("{run}", run, "{worker}", strconv.Itoa(w), "{i}", strconv.Itoa(i)).Replace(s)
	}
	var answer *firstAnswer
	first = func() *firstAnswer { return answer }
	if c.grpc {
		conn, err := grpc.NewClient(c.target, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, nil, nil, fmt.Errorf("gRPC client for %s: %w", c.target, err)
		}
		client := healthpb.NewHealthClient(conn)
		send = func(w, i int) sample {
			md := metadata.MD{}
			for _, h := range c.headers {
				md.Append(h[0], expand(h[1], w, i))
			}
			ctx, cancel := context.WithTimeout(metadata.NewOutgoingContext(context.Background(), md), c.timeout)
			defer cancel()
			var header metadata.MD
			t0 := time.Now()
			_, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&header))
			x := sample{StartUnixNano: t0.UnixNano(), MS: msSince(t0), Status: status.Code(err).String()}
			if v := header.Get("x-echo-server"); len(v) > 0 {
				x.Server = v[0]
			}
			if err != nil {
				x.err = err.Error()
			}
			if i == 0 {
				answer = &firstAnswer{Status: x.Status, Header: header, Body: x.err}
			}
			return x
		}
		return send, first, func() { conn.Close() }, nil
	}

	transport := &http.Transport{MaxIdleConns: 2 * c.concurrency, MaxIdleConnsPerHost: 2 * c.concurrency, DisableCompression: true, IdleConnTimeout: time.Minute,
		DisableKeepAlives: c.newConn}
	client := &http.Client{
		Transport:     transport,
		Timeout:       c.timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	send = func(w, i int) sample {
		t0 := time.Now()
		x := sample{StartUnixNano: t0.UnixNano(), Status: "error"}
		req, err := http.NewRequest(c.method, expand(c.target, w, i), strings.NewReader(c.body))
		if err != nil {
			x.err = err.Error()
			return x
		}
		for _, h := range c.headers {
			if strings.EqualFold(h[0], "Host") {
				req.Host = expand(h[1], w, i)
			} else {
				req.Header.Add(h[0], expand(h[1], w, i))
			}
		}
		resp, err := client.Do(req)
		if err != nil {
			x.MS, x.err = msSince(t0), err.Error()
			return x
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		x.MS, x.Status = msSince(t0), strconv.Itoa(resp.StatusCode)
		if err != nil {
			x.Status, x.err = "error", fmt.Sprintf("reading the body: %v", err)
		}
		x.Server = servedBy(body, resp.Header)
		if v := resp.Header.Get("Plexus-Proxy-Error"); v != "" {
			x.ProxyError = v
			if x.err == "" {
				x.err = "plexus-proxy-error: " + v // counted under its reason
			}
		}
		if i == 0 {
			answer = &firstAnswer{Status: x.Status, Header: resp.Header, Body: string(body)}
		}
		return x
	}
	return send, first, transport.CloseIdleConnections, nil
}

// servedBy names the server of an answer of `testapp serve`: the server
// of an echo, the host of "hello from HOST ...", or X-Echo-Server.
func servedBy(body []byte, header http.Header) string {
	if len(body) > 0 && body[0] == '{' {
		var e struct{ Server string }
		if json.Unmarshal(body, &e) == nil && e.Server != "" {
			return e.Server
		}
	}
	if rest, ok := strings.CutPrefix(string(body), "hello from "); ok {
		host, _, _ := strings.Cut(rest, " ")
		return host
	}
	return header.Get("X-Echo-Server")
}

func msSince(t0 time.Time) float64 { return float64(time.Since(t0).Microseconds()) / 1000 }
