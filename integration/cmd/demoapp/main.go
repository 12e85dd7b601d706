// Command demoapp is the application `make demo` meshes: a web frontend
// that calls two backends for every page — "books" over HTTP/1.1 and
// "votes" over gRPC — and a load generator that keeps the frontend busy.
//
//	demoapp web   --addr :8080 --books http://books:8080 --votes votes:9090
//	demoapp books --addr :8080
//	demoapp votes --addr :9090
//	demoapp load  --target http://web:8080/ --rps 20
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: demoapp web|books|votes|load [flags]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	addr := fs.String("addr", ":8080", "listen address")
	books := fs.String("books", "http://books:8080", "books backend URL")
	votes := fs.String("votes", "votes:9090", "votes backend host:port")
	target := fs.String("target", "http://web:8080/", "URL the load generator calls")
	rps := fs.Float64("rps", 20, "requests per second of the load generator")
	fail := fs.Float64("fail", 0, "books: the fraction of requests answered 503 (every 1/fail-th, not at random)")
	version := fs.String("version", "v1", "books: the version named in each answer")
	fs.Parse(os.Args[2:])
	var err error
	switch os.Args[1] {
	case "web":
		err = web(ctx, *addr, *books, *votes)
	case "books":
		err = serveHTTP(ctx, *addr, booksHandler(*version, *fail))
	case "votes":
		err = serveVotes(ctx, *addr)
	case "load":
		err = load(ctx, *target, *rps)
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		log.Fatalf("demoapp %s: %v", os.Args[1], err)
	}
}

// jsonCodec lets the votes service speak gRPC without generated code: the
// messages are JSON, the transport is ordinary gRPC over HTTP/2.
type jsonCodec struct{}

func (jsonCodec) Marshal(v any) ([]byte, error)   { return json.Marshal(v) }
func (jsonCodec) Unmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }
func (jsonCodec) Name() string                    { return "json" }

func init() { encoding.RegisterCodec(jsonCodec{}) }

type voteRequest struct{ Book string }
type voteReply struct {
	Book  string
	Votes int64
}

const voteMethod = "/demo.Votes/Vote"

func serveVotes(ctx context.Context, addr string) error {
	var total atomic.Int64
	srv := grpc.NewServer()
	srv.RegisterService(&grpc.ServiceDesc{
		ServiceName: "demo.Votes",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "Vote", Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			var req voteRequest
			if err := dec(&req); err != nil {
				return nil, err
			}
			return &voteReply{Book: req.Book, Votes: total.Add(1)}, nil
		}}},
	}, struct{}{})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	go func() { <-ctx.Done(); srv.GracefulStop() }()
	log.Printf("votes: gRPC on %s", addr)
	return srv.Serve(ln)
}

var titles = []string{"Dune", "Neuromancer", "Snow Crash", "The Left Hand of Darkness", "Hyperion"}

// booksHandler answers with a random title and the version, failing the
// given fraction of requests with 503 (exactly: request k fails when
// floor((k+1)·fail) > floor(k·fail)), so a canary that fails is visible
// and retries have something to do.
func booksHandler(version string, fail float64) http.Handler {
	var n atomic.Int64
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k := float64(n.Add(1) - 1)
		if fail > 0 && math.Floor((k+1)*fail) > math.Floor(k*fail) {
			http.Error(w, "books "+version+": failing as configured", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]string{"book": titles[rand.IntN(len(titles))], "version": version})
	})
}

func web(ctx context.Context, addr, books, votes string) error {
	conn, err := grpc.NewClient(votes, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.CallContentSubtype("json")))
	if err != nil {
		return err
	}
	defer conn.Close()
	client := &http.Client{Timeout: 5 * time.Second}
	return serveHTTP(ctx, addr, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, _ := http.NewRequestWithContext(r.Context(), http.MethodGet, books+"/books", nil)
		resp, err := client.Do(req)
		if err != nil {
			http.Error(w, "books: "+err.Error(), http.StatusBadGateway)
			return
		}
		var book struct{ Book string }
		err = json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&book)
		resp.Body.Close()
		if err != nil {
			http.Error(w, "books: "+err.Error(), http.StatusBadGateway)
			return
		}
		var reply voteReply
		cctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		if err := conn.Invoke(cctx, voteMethod, &voteRequest{Book: book.Book}, &reply); err != nil {
			http.Error(w, "votes: "+err.Error(), http.StatusBadGateway)
			return
		}
		fmt.Fprintf(w, "%s has %d votes\n", reply.Book, reply.Votes)
	}))
}

func serveHTTP(ctx context.Context, addr string, h http.Handler) error {
	srv := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	log.Printf("serving HTTP on %s", addr)
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// load calls target at a steady rate and logs a summary every 10 s.
func load(ctx context.Context, target string, rps float64) error {
	client := &http.Client{Timeout: 5 * time.Second}
	tick := time.NewTicker(time.Duration(float64(time.Second) / rps))
	defer tick.Stop()
	report := time.NewTicker(10 * time.Second)
	defer report.Stop()
	var ok, failed atomic.Int64
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-report.C:
			log.Printf("load: %d ok, %d failed in the last 10s", ok.Swap(0), failed.Swap(0))
		case <-tick.C:
			go func() {
				resp, err := client.Get(target)
				if err != nil {
					failed.Add(1)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					ok.Add(1)
				} else {
					failed.Add(1)
				}
			}()
		}
	}
}
