package percent

import (
	"net/url"
	"testing"
)

func TestQuery(t *testing.T) {
	for raw, want := range map[string]string{
		"":          "",
		"plain":     "plain",
		"a+b":       "a b",
		"%41%62":    "Ab",
		"%2f%2F":    "//",
		"100%":      "100%",  // malformed: stands for itself
		"%zz%4":     "%zz%4", // likewise
		"%%41":      "%A",
		"caf%C3%A9": "café",
	} {
		if got := Query(raw); got != want {
			t.Errorf("Query(%q) = %q, want %q", raw, got, want)
		}
		if !QueryEqual(raw, want) || QueryEqual(raw, want+"x") {
			t.Errorf("QueryEqual(%q, %q) disagrees with Query", raw, want)
		}
	}
}

// FuzzQuery holds Query to net/url wherever net/url accepts the input,
// and QueryEqual and AppendQuery to Query everywhere.
func FuzzQuery(f *testing.F) {
	for _, s := range []string{"a+b", "%41", "%4", "%%", "%zz", "x%2Fy", "%C3%A9+"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		got := Query(raw)
		if want, err := url.QueryUnescape(raw); err == nil && got != want {
			t.Errorf("Query(%q) = %q, net/url %q", raw, got, want)
		}
		if !QueryEqual(raw, got) {
			t.Errorf("QueryEqual(%q, %q) = false", raw, got)
		}
		if b := AppendQuery([]byte("x"), raw); string(b) != "x"+got {
			t.Errorf("AppendQuery(%q) = %q, want x%q", raw, b, got)
		}
	})
}

func TestByte(t *testing.T) {
	for _, c := range []struct {
		hi, lo byte
		want   byte
	}{{'0', '0', 0}, {'4', '1', 'A'}, {'f', 'F', 0xff}, {'A', 'b', 0xab}} {
		if got := Byte(c.hi, c.lo); got != c.want {
			t.Errorf("Byte(%c, %c) = %#x, want %#x", c.hi, c.lo, got, c.want)
		}
	}
	for c := range 256 {
		want := '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
		if IsHex(byte(c)) != want {
			t.Errorf("IsHex(%#x) = %v", c, !want)
		}
	}
}
