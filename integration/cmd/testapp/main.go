// Command testapp is the small workload the integration tests and the
// demo run in pods.
//
//	testapp serve [-grpc ADDR] [-delay D] [-exit-on-term] [ADDR...]
//	                                       answer HTTP on each ADDR (default :8080)
//	testapp get URL...                     fetch each URL and print the answer
//	testapp poll [-interval D] [-new-conn] URL
//	testapp lookup NAME...
//	testapp load [flags] URL | -grpc HOST:PORT
//	testapp touch FILE...                  create each FILE (ends a load's -stop-file)
//	testapp cat [-wait D] FILE             print FILE once it exists (a load's -out)
//
// # serve
//
// By default every request is answered 200 "hello from HOST port=P
// path=/p", which tells a test which pod served it and whether its
// connection was redirected to another port. A request changes that with
// query parameters; each may also be sent as the header x-<name> (the
// query wins):
//
//   - fail=F (0 to 1) and status=N (default 503): answer N to exactly F of
//     the requests, evenly spread: the k-th request (from 0) fails when
//     floor((k+1)F) > floor(kF), so 0.5 answers ok, fail, ok, fail, ...
//     There is one counter per fail-key (header x-fail-key; none is a
//     key too), so concurrent clients can each have a sequence of their own.
//   - delay=D: wait D before answering, or until the request is cancelled
//     (counted and logged as "cancelled: ..."). With attempt-key (header
//     x-attempt-key) only the first request carrying a key waits; the
//     later ones (retries) answer at once.
//   - echo=1: answer JSON {server, port, method, path, raw_query, host,
//     remote, headers} describing the request as received, with the
//     response header X-Echo-Server: HOST.
//
// The delay comes first, then the failure, then the answer. A malformed
// parameter is answered 400 naming it.
//
// -delay D makes a slow replica: every request (HTTP or gRPC) that asks
// no delay of its own waits D, as if it had asked delay=D.
// GET /testapp/delay?ms=N replaces that delay at run time with N
// milliseconds, until the next /testapp/delay; ms=0 turns it off, whatever
// -delay said: a replica a test slows down and restores. -exit-on-term
// exits at once on SIGTERM (status 143), with no graceful shutdown:
// connections are cut and requests in flight are lost; without it SIGTERM
// or SIGINT stop accepting and let requests in flight finish (up to 5s).
//
// Every request is logged to standard output as it arrives (before any
// delay): "METHOD PATH from ADDR on port P", with " id=ID" when it carries
// the header x-request-id, so that the logs of replicas which are gone
// tell which requests reached them.
//
// GET /testapp/fail?status=N makes every later request fail as if it
// asked fail=1&status=N (a gRPC call with its x-code), until
// /testapp/fail?status=0: a replica a test breaks and fixes at run time.
// GET /testapp/received answers JSON {host, dropped, received}: every
// HTTP request answered (up to 65536; past that the older half is
// forgotten and counted in dropped), in the order of arrival, each as
// {unix_nano (when it arrived), path, status (0: cancelled during its
// delay, never answered)}.
//
// GET /stats answers the counts of this process as JSON: requests,
// grpc, in_flight, failed (as asked), delayed (delays served to the end),
// cancelled (requests whose context ended during their delay), posts (POST
// requests) and duplicate_posts (POSTs whose x-request-id this process had
// seen already: a POST delivered twice); /stats?reset=1 also zeroes them
// and forgets fail and attempt keys and POST ids. /stats, /healthz,
// /testapp/delay, /testapp/fail and /testapp/received are not counted, not
// delayed, not recorded and not logged as requests.
//
// With -grpc ADDR, serve also answers grpc.health.v1.Health/Check (SERVING)
// on ADDR, reading the same parameters from the call's metadata x-fail,
// x-code (the gRPC code of a failure, default 14 UNAVAILABLE), x-fail-key,
// x-delay and x-attempt-key, and sending the response header
// x-echo-server: HOST. gRPC calls count in /stats of the HTTP addresses.
//
// # load
//
// load sends -n requests (or -rate per second for -duration) over -c
// keep-alive connections and prints a JSON summary: run (the {run} below),
// requests, seconds, statuses (HTTP status, or gRPC code name with -grpc,
// or "error"), errors, servers (which host answered: an echo's server,
// "hello from HOST", or X-Echo-Server), latency_ms
// {min,p50,p90,p99,p999,max}, with -slow-threshold D slow_share (the share
// of requests that took longer than D, failed ones included), first
// (status, header and body of request 0; redirects are not followed) and,
// with -timeline, every request's start_unix_nano, ms, status, server and
// proxy_error (the answer's plexus-proxy-error header), in the order of
// the requests' indexes. A proxy's answer is also counted in errors
// under "plexus-proxy-error: REASON". -X sets the method (GET, POST,
// ...), -d the body, -H 'Name: value' a header (repeatable; "Host" sets
// the Host); {run} (random per invocation), {worker} and {i} (the
// request's index) are replaced in headers and the URL, so
// -H 'x-attempt-key: {run}-{i}' gives every request its own attempt key
// and -H 'x-fail-key: {run}-{worker}' every connection its own failure
// sequence. Every request carries x-request-id: {run}-{i}, unique per
// request, unless -H sets x-request-id. With -stop-file FILE the run also
// ends once FILE exists (the caller runs testapp touch FILE to end a run
// whose length it does not know in advance; -duration still bounds it),
// and the summary covers the requests sent until then. With -out FILE the
// summary is also written to FILE, whole, before it is printed: a caller
// whose kubectl exec stream broke reads it with testapp cat -wait D FILE. With -grpc
// the target is HOST:PORT, each request is a Health/Check and the headers
// are sent as metadata.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: testapp serve [-grpc ADDR] [-delay D] [-exit-on-term] [ADDR...] | testapp get URL... | testapp poll [-interval D] [-new-conn] URL | testapp lookup NAME... | testapp load [flags] URL | testapp touch FILE... | testapp cat [-wait D] FILE")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(os.Args[2:])
	case "load":
		err = load(os.Args[2:])
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
	case "touch":
		err = touch(os.Args[2:])
	case "cat":
		err = cat(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q (want serve, get, poll, lookup, load, touch or cat)", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "testapp:", err)
		os.Exit(1)
	}
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
