package packetcapture

import (
	"strings"
	"testing"
)

func TestTLSRecords(t *testing.T) {
	hello := []byte{22, 3, 1, 0, 2, 1, 0, 23, 3, 3, 0, 1, 'x'}
	if err := tlsRecords(hello); err != nil {
		t.Fatalf("valid records rejected: %v", err)
	}
	if err := tlsRecords([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")); err == nil || !strings.Contains(err.Error(), "not a TLS record") {
		t.Fatalf("plaintext HTTP accepted: %v", err)
	}
	// A record header followed by plaintext in the next record slot.
	mixed := append([]byte{23, 3, 3, 0, 1, 'x'}, "GET /"...)
	if err := tlsRecords(mixed); err == nil {
		t.Fatal("TLS record followed by plaintext accepted")
	}
}
