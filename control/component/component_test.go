package component

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"log/slog"
	"strings"
	"testing"
)

func TestParseFlags(t *testing.T) {
	newFS := func() (*flag.FlagSet, *string) {
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		return fs, fs.String("addr", ":1", "")
	}
	fs, addr := newFS()
	if err := ParseFlags(fs, []string{"--addr", ":2"}, func() error { return nil }); err != nil || *addr != ":2" {
		t.Fatalf("ParseFlags = %v, addr %q", err, *addr)
	}
	fs, _ = newFS()
	if err := ParseFlags(fs, []string{"stray"}, nil); err == nil || !strings.Contains(err.Error(), `unexpected arguments ["stray"]`) {
		t.Errorf("a positional argument: %v", err)
	}
	fs, _ = newFS()
	if err := ParseFlags(fs, []string{"--nope"}, nil); err == nil {
		t.Error("an unknown flag was accepted")
	}
	fs, _ = newFS()
	bad := errors.New("--addr: bad")
	if err := ParseFlags(fs, nil, func() error { return bad }); !errors.Is(err, bad) || !strings.HasPrefix(err.Error(), "invalid configuration: ") {
		t.Errorf("validation error = %v", err)
	}
}

func TestLoggerLevelAndRegistry(t *testing.T) {
	var buf bytes.Buffer
	log := Logger(&buf, slog.LevelWarn)
	log.Info("hidden")
	log.Warn("shown")
	if out := buf.String(); strings.Contains(out, "hidden") || !strings.Contains(out, `"msg":"shown"`) {
		t.Errorf("log output %q", out)
	}
	mfs, err := Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, mf := range mfs {
		have[mf.GetName()] = true
	}
	if !have["go_goroutines"] || !have["process_cpu_seconds_total"] {
		t.Errorf("registry lacks the Go or process collector: %v", have)
	}
}

// startRecorder is a config whose Start records how it was called.
type startRecorder struct {
	addr      string
	userAgent *string
}

func (r startRecorder) Start(w io.Writer, userAgent string) (Env, error) {
	*r.userAgent = userAgent
	return Env{Log: slog.New(slog.NewTextHandler(w, nil))}, nil
}

func TestBegin(t *testing.T) {
	var started string
	parse := func(args []string, out io.Writer) (startRecorder, error) {
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		fs.SetOutput(out)
		r := startRecorder{userAgent: &started}
		fs.StringVar(&r.addr, "addr", ":1", "")
		return r, ParseFlags(fs, args, nil)
	}
	var out, logs bytes.Buffer
	cfg, env, err := Begin([]string{"--addr", ":2"}, &out, &logs, "plexus-x", parse)
	if err != nil || cfg.addr != ":2" || started != "plexus-x" || env.Log == nil {
		t.Fatalf("Begin = %+v, %+v, %v; started as %q", cfg, env, err, started)
	}
	env.Log.Info("hello")
	if !strings.Contains(logs.String(), "hello") {
		t.Errorf("the Env does not log to logs: %q", logs.String())
	}

	started = ""
	if _, _, err := Begin([]string{"--nope"}, &out, &logs, "plexus-x", parse); err == nil || started != "" {
		t.Errorf("a bad flag: err %v, started as %q; want the error and no Start", err, started)
	}
	if !strings.Contains(out.String(), "nope") {
		t.Errorf("the flag error is not written to out: %q", out.String())
	}
}
