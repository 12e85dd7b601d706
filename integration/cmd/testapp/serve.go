package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// serve answers HTTP on every address (and gRPC on -grpc ADDR) as the
// package documentation describes.
func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	grpcAddr := fs.String("grpc", "", "also serve grpc.health.v1.Health on this address")
	delay := fs.Duration("delay", 0, "delay every request that asks no delay of its own by this much (a slow replica; /testapp/delay changes it at run time)")
	exitOnTerm := fs.Bool("exit-on-term", false, "exit at once on SIGTERM, without a graceful shutdown")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *delay < 0 {
		return fmt.Errorf("-delay %v is negative", *delay)
	}
	addrs := fs.Args()
	if len(addrs) == 0 {
		addrs = []string{":8080"}
	}
	host, _ := os.Hostname()
	b := newBackend(host)
	b.delay = *delay
	shutdownOn := []os.Signal{syscall.SIGTERM, syscall.SIGINT}
	if *exitOnTerm {
		shutdownOn = shutdownOn[1:]
		term := make(chan os.Signal, 1)
		signal.Notify(term, syscall.SIGTERM)
		go func() {
			<-term
			fmt.Println("SIGTERM: exiting at once (-exit-on-term)")
			os.Exit(143) // as if the signal had killed it
		}()
	}
	ctx, stop := signal.NotifyContext(context.Background(), shutdownOn...)
	defer stop()
	errs := make(chan error, len(addrs)+1)
	for _, addr := range addrs {
		srv := &http.Server{Addr: addr, Handler: b.mux(), ReadHeaderTimeout: 10 * time.Second}
		go func() {
			<-ctx.Done()
			shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			srv.Shutdown(shutdown)
		}()
		go func() {
			fmt.Printf("serving on %s as %s\n", addr, host)
			if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
				errs <- fmt.Errorf("serving on %s: %w", addr, err)
				return
			}
			errs <- nil
		}()
	}
	n := len(addrs)
	if *grpcAddr != "" {
		n++
		ln, err := net.Listen("tcp", *grpcAddr)
		if err != nil {
			return fmt.Errorf("gRPC on %s: %w", *grpcAddr, err)
		}
		srv := grpc.NewServer()
		healthpb.RegisterHealthServer(srv, healthServer{b: b})
		go func() { <-ctx.Done(); srv.GracefulStop() }()
		go func() {
			fmt.Printf("serving gRPC on %s as %s\n", *grpcAddr, host)
			if err := srv.Serve(ln); err != nil {
				errs <- fmt.Errorf("gRPC on %s: %w", *grpcAddr, err)
				return
			}
			errs <- nil
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			return err
		}
	}
	return nil
}

// stats are the counts /stats serves. Requests, gRPC calls included,
// exclude /stats and /healthz.
type stats struct {
	Requests  int64 `json:"requests"`
	GRPC      int64 `json:"grpc"`
	InFlight  int64 `json:"in_flight"`
	Failed    int64 `json:"failed"`    // failed as asked (fail)
	Delayed   int64 `json:"delayed"`   // delays served to their end
	Cancelled int64 `json:"cancelled"` // requests whose context ended during their delay
	// Posts counts POST requests; DuplicatePosts those whose x-request-id
	// this process had seen before (a POST delivered twice).
	Posts          int64 `json:"posts"`
	DuplicatePosts int64 `json:"duplicate_posts"`
}

// backend is the state of `testapp serve`: counts, the failure counter of
// every fail key, and the attempt keys and POST request ids seen.
type backend struct {
	host string

	mu       sync.Mutex
	stats    stats
	counters map[string]uint64
	attempts map[string]bool
	postIDs  map[string]bool
	delay    time.Duration // the delay of a request that asks none: -delay, then /testapp/delay
	failing  int           // the status every request fails with (/testapp/fail), or 0
	received []received    // HTTP requests answered, in the order they were
	dropped  int64         // requests forgotten from received (maxReceived)
}

// received is one HTTP request of /testapp/received.
type received struct {
	UnixNano int64  `json:"unix_nano"` // when it arrived
	Path     string `json:"path"`
	Status   int    `json:"status"` // 0: cancelled during its delay, never answered
}

// maxReceived bounds the requests /testapp/received remembers; past it
// the older half is forgotten.
const maxReceived = 1 << 16

// maxDelayMillis bounds /testapp/delay?ms=N: an hour.
const maxDelayMillis = 3_600_000

// maxAttemptKeys bounds the attempt keys (and the POST request ids)
// remembered; past it they are forgotten all at once.
const maxAttemptKeys = 1 << 17

func newBackend(host string) *backend {
	return &backend{host: host, counters: map[string]uint64{}, attempts: map[string]bool{}, postIDs: map[string]bool{}}
}

// ask is what one request asks of the backend.
type ask struct {
	fail       float64
	failKey    string
	status     int // HTTP status of a failure
	code       int // gRPC code of a failure
	delay      time.Duration
	attemptKey string
	echo       bool
}

// parseAsk reads the parameters with get ("fail", "status", ...).
func parseAsk(get func(name string) string) (ask, error) {
	a := ask{status: http.StatusServiceUnavailable, code: 14, failKey: get("fail-key"), attemptKey: get("attempt-key")}
	var errs []error
	if v := get("fail"); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || !(f >= 0 && f <= 1) {
			errs = append(errs, fmt.Errorf("fail=%q is not a fraction from 0 to 1", v))
		}
		a.fail = f
	}
	if v := get("status"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 100 || n > 599 {
			errs = append(errs, fmt.Errorf("status=%q is not an HTTP status", v))
		}
		a.status = n
	}
	if v := get("code"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 16 {
			errs = append(errs, fmt.Errorf("code=%q is not a gRPC error code (1-16)", v))
		}
		a.code = n
	}
	if v := get("delay"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			errs = append(errs, fmt.Errorf("delay=%q is not a duration", v))
		}
		a.delay = d
	}
	a.echo = get("echo") != "" && get("echo") != "0"
	return a, errors.Join(errs...)
}

// forceFailure makes a fail every time, with the status (HTTP) set by
// /testapp/fail, while that is on.
func (b *backend) forceFailure(a *ask) {
	b.mu.Lock()
	status := b.failing
	b.mu.Unlock()
	if status != 0 {
		a.fail, a.status = 1, status
	}
}

// record remembers an HTTP request for /testapp/received.
func (b *backend) record(arrived time.Time, path string, status int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.received) >= maxReceived {
		half := len(b.received) / 2
		b.dropped += int64(half)
		b.received = append(b.received[:0], b.received[half:]...)
	}
	b.received = append(b.received, received{UnixNano: arrived.UnixNano(), Path: path, Status: status})
}

// handle counts a request and serves its delay; it reports whether the
// request should fail, and false in ok when it was cancelled.
func (b *backend) handle(ctx context.Context, what string, a ask, grpc bool) (fail, ok bool) {
	b.mu.Lock()
	if a.delay == 0 {
		a.delay = b.delay
	}
	b.stats.Requests++
	b.stats.InFlight++
	if grpc {
		b.stats.GRPC++
	}
	delay := a.delay > 0 && (a.attemptKey == "" || b.firstAttemptLocked(a.attemptKey))
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		b.stats.InFlight--
		b.mu.Unlock()
	}()
	if delay {
		start := time.Now()
		timer := time.NewTimer(a.delay)
		defer timer.Stop()
		select {
		case <-timer.C:
			b.count(&b.stats.Delayed)
		case <-ctx.Done():
			b.count(&b.stats.Cancelled)
			fmt.Printf("cancelled: %s after %v of a %v delay\n", what, time.Since(start).Round(time.Millisecond), a.delay)
			return false, false
		}
	}
	if b.shouldFail(a.failKey, a.fail) {
		b.count(&b.stats.Failed)
		return true, true
	}
	return false, true
}

func (b *backend) count(n *int64) {
	b.mu.Lock()
	*n++
	b.mu.Unlock()
}

// countPost counts a POST and, when its request id is one this process
// has seen, a duplicate.
func (b *backend) countPost(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stats.Posts++
	if id == "" {
		return
	}
	if b.postIDs[id] {
		b.stats.DuplicatePosts++
		return
	}
	if len(b.postIDs) >= maxAttemptKeys {
		clear(b.postIDs)
	}
	b.postIDs[id] = true
}

// firstAttemptLocked reports whether key is new, and remembers it.
func (b *backend) firstAttemptLocked(key string) bool {
	if b.attempts[key] {
		return false
	}
	if len(b.attempts) >= maxAttemptKeys {
		clear(b.attempts)
	}
	b.attempts[key] = true
	return true
}

// shouldFail steps key's counter k and fails when floor((k+1)f) >
// floor(k f): exactly f of every key's requests, evenly spread (0.5:
// succeed, fail, succeed, ...).
func (b *backend) shouldFail(key string, f float64) bool {
	if f <= 0 {
		return false
	}
	b.mu.Lock()
	k := b.counters[key]
	b.counters[key] = k + 1
	b.mu.Unlock()
	return math.Floor(float64(k+1)*f+1e-9) > math.Floor(float64(k)*f+1e-9)
}

func (b *backend) mux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("/stats", func(w http.ResponseWriter, r *http.Request) {
		b.mu.Lock()
		s := b.stats
		if r.URL.Query().Get("reset") != "" {
			b.stats = stats{InFlight: s.InFlight}
			clear(b.counters)
			clear(b.attempts)
			clear(b.postIDs)
		}
		b.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(s)
	})
	mux.HandleFunc("/testapp/fail", func(w http.ResponseWriter, r *http.Request) {
		v := r.URL.Query().Get("status")
		status, err := strconv.Atoi(v)
		if err != nil || status != 0 && (status < 100 || status > 599) {
			http.Error(w, fmt.Sprintf("status=%q is neither 0 nor an HTTP status", v), http.StatusBadRequest)
			return
		}
		b.mu.Lock()
		b.failing = status
		b.mu.Unlock()
		fmt.Printf("/testapp/fail: failing every request with %d (0: none)\n", status)
		fmt.Fprintf(w, "failing=%d\n", status)
	})
	mux.HandleFunc("/testapp/delay", func(w http.ResponseWriter, r *http.Request) {
		v := r.URL.Query().Get("ms")
		ms, err := strconv.Atoi(v)
		if err != nil || ms < 0 || ms > maxDelayMillis {
			http.Error(w, fmt.Sprintf("ms=%q is not a number of milliseconds from 0 to %d", v, maxDelayMillis), http.StatusBadRequest)
			return
		}
		d := time.Duration(ms) * time.Millisecond
		b.mu.Lock()
		b.delay = d
		b.mu.Unlock()
		fmt.Printf("/testapp/delay: delaying every request that asks no delay of its own by %v (0: none)\n", d)
		fmt.Fprintf(w, "delay=%v\n", d)
	})
	mux.HandleFunc("/testapp/received", func(w http.ResponseWriter, r *http.Request) {
		b.mu.Lock()
		out := struct {
			Host     string     `json:"host"`
			Dropped  int64      `json:"dropped"`
			Received []received `json:"received"`
		}{b.host, b.dropped, slices.Clone(b.received)}
		b.mu.Unlock()
		slices.SortStableFunc(out.Received, func(x, y received) int { return cmp.Compare(x.UnixNano, y.UnixNano) })
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(out)
	})
	mux.HandleFunc("/", b.serveHTTP)
	return mux
}

// echoed is the answer to echo=1.
type echoed struct {
	Server   string      `json:"server"`
	Port     string      `json:"port"`
	Method   string      `json:"method"`
	Path     string      `json:"path"`
	RawQuery string      `json:"raw_query"`
	Host     string      `json:"host"`
	Remote   string      `json:"remote"`
	Headers  http.Header `json:"headers"`
}

func (b *backend) serveHTTP(w http.ResponseWriter, r *http.Request) {
	arrived, status := time.Now(), http.StatusOK
	defer func() { b.record(arrived, r.URL.Path, status) }()
	port := "?"
	if local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		_, port, _ = net.SplitHostPort(local.String())
	}
	id := r.Header.Get("X-Request-Id")
	logID := ""
	if id != "" {
		logID = " id=" + id
	}
	fmt.Printf("%s %s from %s on port %s%s\n", r.Method, r.URL.Path, r.RemoteAddr, port, logID)
	if r.Method == http.MethodPost {
		b.countPost(id)
	}
	query := r.URL.Query()
	a, err := parseAsk(func(name string) string {
		if v := query.Get(name); v != "" {
			return v
		}
		return r.Header.Get("x-" + name)
	})
	if err != nil {
		status = http.StatusBadRequest
		http.Error(w, err.Error(), status)
		return
	}
	b.forceFailure(&a)
	fail, ok := b.handle(r.Context(), r.Method+" "+r.URL.Path, a, false)
	switch {
	case !ok:
		status = 0
		return // nobody is listening
	case fail:
		status = a.status
		http.Error(w, fmt.Sprintf("failing as asked (fail=%v) on %s", a.fail, b.host), a.status)
	case a.echo:
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Echo-Server", b.host)
		json.NewEncoder(w).Encode(echoed{
			Server: b.host, Port: port, Method: r.Method, Path: r.URL.Path, RawQuery: r.URL.RawQuery,
			Host: r.Host, Remote: r.RemoteAddr, Headers: r.Header,
		})
	default:
		fmt.Fprintf(w, "hello from %s port=%s path=%s\n", b.host, port, r.URL.Path)
	}
}
