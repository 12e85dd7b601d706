package logwatch

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

func TestSeesEveryRecordAndPassesOnWhatNextWants(t *testing.T) {
	var out bytes.Buffer
	next := slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelInfo})
	var seen []string
	log := New(next, func(r slog.Record) {
		attrs := ""
		r.Attrs(func(a slog.Attr) bool { attrs += " " + a.String(); return true })
		seen = append(seen, r.Message+attrs)
	}).With("component", "identity")
	log.Debug("quiet", "n", 1)
	log.Info("issuer loaded", "serial", "ab")
	if want := []string{"quiet n=1 component=identity", "issuer loaded serial=ab component=identity"}; strings.Join(seen, "|") != strings.Join(want, "|") {
		t.Errorf("seen %q, want %q", seen, want)
	}
	if s := out.String(); strings.Contains(s, "quiet") || !strings.Contains(s, `msg="issuer loaded" component=identity serial=ab`) {
		t.Errorf("passed on %q: want the info record only, with its attributes", s)
	}
}
