package localaddr

import (
	"errors"
	"net"
	"net/netip"
	"testing"
)

func TestSetFindsOwnAddressesAndRereadsOnMiss(t *testing.T) {
	reads := 0
	addrs := []net.Addr{&net.IPNet{IP: net.ParseIP("10.0.0.5"), Mask: net.CIDRMask(24, 32)}}
	s := &Set{List: func() ([]net.Addr, error) { reads++; return addrs, nil }}
	if !s.Has(netip.MustParseAddr("10.0.0.5")) || !s.Has(netip.MustParseAddr("::ffff:10.0.0.5")) {
		t.Fatal("own address (plain and v4-mapped) not found")
	}
	if s.Has(netip.MustParseAddr("10.0.0.6")) || s.Has(netip.MustParseAddr("10.0.0.7")) {
		t.Fatal("a neighbour on the same subnet counts as own")
	}
	if reads != 2 {
		t.Fatalf("%d reads, want 2: the first and one for the first miss, none for a second miss right after", reads)
	}
	addrs = append(addrs, &net.IPNet{IP: net.ParseIP("fd00::5"), Mask: net.CIDRMask(64, 128)})
	s.readAt = s.readAt.Add(-2 * rereadAfter)
	if !s.Has(netip.MustParseAddr("fd00::5")) {
		t.Fatal("an address added later is not found after the re-read delay")
	}
}

func TestSetKeepsAddressesWhenListingFails(t *testing.T) {
	fail := false
	s := &Set{List: func() ([]net.Addr, error) {
		if fail {
			return nil, errors.New("netlink down")
		}
		return []net.Addr{&net.IPNet{IP: net.ParseIP("10.0.0.5"), Mask: net.CIDRMask(32, 32)}}, nil
	}}
	s.Has(netip.MustParseAddr("10.0.0.5"))
	fail = true
	s.readAt = s.readAt.Add(-2 * rereadAfter)
	if s.Has(netip.MustParseAddr("10.9.9.9")) || !s.Has(netip.MustParseAddr("10.0.0.5")) {
		t.Fatal("a failed re-read lost the known addresses or invented one")
	}
}
