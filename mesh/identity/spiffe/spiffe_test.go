package spiffe

import (
	"crypto/x509"
	"encoding/json"
	"errors"
	"net/url"
	"strings"
	"testing"
)

func TestParseRoundTrip(t *testing.T) {
	id, err := Parse("spiffe://cluster.local/ns/emojivoto/sa/web")
	if err != nil {
		t.Fatal(err)
	}
	if want := New("cluster.local", "emojivoto", "web"); id != want {
		t.Fatalf("Parse = %+v, want %+v", id, want)
	}
	if id.String() != "spiffe://cluster.local/ns/emojivoto/sa/web" || id.URL().String() != id.String() {
		t.Fatalf("String/URL = %q / %q", id.String(), id.URL())
	}
}

func TestParseRejects(t *testing.T) {
	for in, want := range map[string]string{
		"https://cluster.local/ns/a/sa/b":      "scheme",
		"spiffe:///ns/a/sa/b":                  "trust domain",
		"spiffe://cluster.local:80/ns/a/sa/b":  "trust domain",
		"spiffe://cluster.local/ns/a":          "path",
		"spiffe://cluster.local/ns/a/sa/b/c":   "path",
		"spiffe://cluster.local/ns//sa/b":      "path",
		"spiffe://cluster.local/ns/a/sa/b?x=1": "query",
		"spiffe://cluster.local/ns/a/user/b":   "path",
	} {
		_, err := Parse(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v, want error mentioning %q", in, err, want)
		}
	}
}

func TestFromCertAndVerifyPeer(t *testing.T) {
	id := New("cluster.local", "ns1", "sa1")
	cert := &x509.Certificate{URIs: []*url.URL{id.URL()}}
	chains := [][]*x509.Certificate{{cert}}
	if got, err := VerifyPeer(chains, id); err != nil || got != id {
		t.Fatalf("VerifyPeer = %v, %v", got, err)
	}
	other := New("cluster.local", "ns1", "sa2")
	if _, err := VerifyPeer(chains, other); !errors.Is(err, ErrMismatch) {
		t.Fatalf("VerifyPeer(other) = %v, want ErrMismatch", err)
	}
	if _, err := VerifyPeer(nil, id); err == nil {
		t.Fatal("VerifyPeer(no chain) succeeded")
	}
	two := &x509.Certificate{URIs: []*url.URL{id.URL(), other.URL()}}
	if _, err := FromCert(two); err == nil {
		t.Fatal("FromCert accepted two URI SANs")
	}
	dns := &x509.Certificate{URIs: []*url.URL{id.URL()}, DNSNames: []string{"x"}}
	if _, err := FromCert(dns); err == nil {
		t.Fatal("FromCert accepted an extra DNS SAN")
	}
}

func TestMarshalText(t *testing.T) {
	b, err := json.Marshal(map[string]ID{"id": New("td", "ns", "sa")})
	if err != nil || string(b) != `{"id":"spiffe://td/ns/ns/sa/sa"}` {
		t.Fatalf("json = %s, %v", b, err)
	}
}
