// Command testapp is the small HTTP workload the integration tests and the
// demo run in pods: "serve" answers every request with who served it, "get"
// fetches a URL and prints the answer, "poll" fetches one for ever and
// prints a time-stamped line per answer.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: testapp serve [ADDR...] | testapp get URL... | testapp poll [-interval D] [-new-conn] URL | testapp lookup NAME...")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "serve":
		addrs := os.Args[2:]
		if len(addrs) == 0 {
			addrs = []string{":8080"}
		}
		err = serve(addrs)
	case "get":
		if len(os.Args) < 3 {
			err = errors.New("usage: testapp get URL...")
			break
		}
		for _, u := range os.Args[2:] {
			if err = get(u); err != nil {
				break
			}
		}
	case "lookup":
		err = lookup(os.Args[2:])
	case "poll":
		err = poll(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q (want serve, get, poll or lookup)", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "testapp:", err)
		os.Exit(1)
	}
}

// serve answers on every address with the host name and the local port
// that accepted the connection, which tells a test whether a connection was
// redirected to another port.
func serve(addrs []string) error {
	host, _ := os.Hostname()
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		port := "?"
		if local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
			_, port, _ = net.SplitHostPort(local.String())
		}
		fmt.Printf("%s %s from %s on port %s\n", r.Method, r.URL.Path, r.RemoteAddr, port)
		fmt.Fprintf(w, "hello from %s port=%s path=%s\n", host, port, r.URL.Path)
	})
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	errs := make(chan error, len(addrs))
	for _, addr := range addrs {
		srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
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
	for range addrs {
		if err := <-errs; err != nil {
			return err
		}
	}
	return nil
}

// get retries for a short while so a client started beside its server
// does not fail while DNS and endpoints catch up.
func get(rawURL string) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		return fmt.Errorf("parsing %q: %w", rawURL, err)
	}
	client := &http.Client{Timeout: 5 * time.Second}
	deadline := time.Now().Add(60 * time.Second)
	for {
		addrs, err := net.LookupHost(u.Hostname())
		if err == nil {
			fmt.Printf("resolved %s to %s\n", u.Hostname(), strings.Join(addrs, ","))
			var body string
			body, err = fetch(client, rawURL)
			if err == nil {
				fmt.Print(body)
				return nil
			}
		}
		if time.Now().After(deadline) {
			return err
		}
		fmt.Fprintln(os.Stderr, "retrying:", err)
		time.Sleep(time.Second)
	}
}

func fetch(client *http.Client, url string) (string, error) {
	resp, err := client.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s: %s", url, resp.Status, body)
	}
	return string(body), nil
}

// lookup resolves each name and prints "NAME: ADDRS" or "NAME: not found";
// any other resolver failure (timeout, SERVFAIL) is an error.
func lookup(names []string) error {
	for _, name := range names {
		addrs, err := net.LookupHost(name)
		var dnsErr *net.DNSError
		switch {
		case err == nil:
			fmt.Printf("%s: %s\n", name, strings.Join(addrs, ","))
		case errors.As(err, &dnsErr) && dnsErr.IsNotFound:
			fmt.Printf("%s: not found\n", name)
		default:
			return fmt.Errorf("looking up %s: %w", name, err)
		}
	}
	return nil
}

// poll fetches a URL every interval until killed, printing
// "<RFC3339Nano> ok <first line of the body>" or "<time> error <why>" for
// each attempt, so a test can tell from the log which server answered
// when. With -new-conn every request opens a new connection.
func poll(args []string) error {
	fs := flag.NewFlagSet("poll", flag.ContinueOnError)
	interval := fs.Duration("interval", 100*time.Millisecond, "time between requests")
	newConn := fs.Bool("new-conn", false, "open a new connection for every request")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("usage: testapp poll [-interval D] [-new-conn] URL")
	}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: *newConn}}
	for {
		body, err := fetch(client, fs.Arg(0))
		now := time.Now().UTC().Format(time.RFC3339Nano)
		if err != nil {
			fmt.Printf("%s error %v\n", now, err)
		} else {
			first, _, _ := strings.Cut(body, "\n")
			fmt.Printf("%s ok %s\n", now, first)
		}
		time.Sleep(*interval)
	}
}
