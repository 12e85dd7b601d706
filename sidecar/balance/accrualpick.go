package balance

// Picking among the Breakers of an Accrual (accrual.go): power of two
// choices over the available ones.

import "math"

// CountAvailable returns how many of bs are Available at now.
func CountAvailable(bs []*Breaker, now int64) int {
	n := 0
	for _, b := range bs {
		if b.Available(now) {
			n++
		}
	}
	return n
}

// pickTries is how many pairs PickP2CAvailable draws before it scans.
// With a share f of endpoints out a pair is all out with probability f²,
// so with f ≤ ½ (the default floor) it scans in under 0.4 % of picks.
const pickTries = 4

// PickP2CAvailable is PickP2C over the available endpoints of bs: it draws
// pairs of distinct endpoints with rnd (re-mixed for each pair), and
// returns the better available one as pickPair says (a due probe first,
// then as IndexP2C: responsive first, the lower Cost at now, or load
// when their RTTs are alike, a tie within 1 % broken at random),
// claiming its probe if it is probing (if another
// caller won that claim, the other of the pair); a pair of two quiet ones
// is drawn again, up to Redraws times, as IndexP2C does (silence.go).
// After pickTries pairs with none available it scans bs once from
// a random place and takes the better of the first two available. When
// none is and more endpoints are out than the floor allows of those left
// (the set shrank), the earliest ejected one gets its probe now. nil
// means none is available (with a floor above 0, only while a probe is
// in flight). Place the request on the result
// with Start and report its outcome with Success, Failure or Cancel. It
// allocates nothing.
func PickP2CAvailable(bs []*Breaker, now int64, rnd uint64) *Breaker {
	if i := IndexP2CAvailable(bs, now, rnd); i >= 0 {
		return bs[i]
	}
	return nil
}

// IndexP2CAvailable is PickP2CAvailable returning the index in bs (-1 for
// none), for callers that keep their own state beside each Breaker.
func IndexP2CAvailable(bs []*Breaker, now int64, rnd uint64) int {
	n := uint64(len(bs))
	switch n {
	case 0:
		return -1
	case 1:
		if bs[0].take(now) {
			return 0
		}
		return forceProbe(bs)
	}
	for tries, redraws := 0, 0; tries < pickTries; {
		i := (rnd & math.MaxUint32) * n >> 32
		j := (rnd >> 32) * (n - 1) >> 32
		if j >= i {
			j++
		}
		if n > 2 && redraws < Redraws && bs[i].quiet(now) && bs[j].quiet(now) {
			redraws++ // both quiet: another pair, as IndexP2C
			rnd = mix(rnd)
			continue
		}
		tries++
		if k := pickPair(bs, int(i), int(j), now, mix(rnd)); k >= 0 {
			return k
		}
		rnd = mix(rnd)
	}
	i := int((rnd & math.MaxUint32) * n >> 32)
	first := -1
	for range n {
		if bs[i].Available(now) {
			if first < 0 {
				first = i
			} else if k := pickPair(bs, first, i, now, mix(rnd)); k >= 0 {
				return k
			} else {
				first = -1 // both claimed by others meanwhile
			}
		}
		if i++; i == int(n) {
			i = 0
		}
	}
	if first >= 0 && bs[first].take(now) {
		return first
	}
	return forceProbe(bs)
}

// forceProbe keeps the floor after the set shrank: when more endpoints
// are out than the floor allows of those left (discovery removed some
// that were in), the ejected one whose penalty ends first gets its probe
// now. Its index, or -1.
func forceProbe(bs []*Breaker) int {
	a := bs[0].acc
	if a.out.Load() <= a.cfg.MaxOut(a.members.Load()) {
		return -1
	}
	best := -1
	for i, b := range bs {
		if b.phase.Load() == phaseEjected && (best < 0 || b.until.Load() < bs[best].until.Load()) {
			best = i
		}
	}
	if best >= 0 && bs[best].phase.CompareAndSwap(phaseEjected, phaseProbing) {
		a.probes.Add(1)
		return best
	}
	return -1
}

// pickPair returns the index of the one of bs[i] and bs[j] to place a
// request on at now, taken, or the other if it cannot be taken, or -1
// when neither is available. Of two available: a due probe first (it is
// the way back of an ejected endpoint, and its estimate, unrefreshed
// while it was out, must not postpone it); then, as IndexP2C, a
// responsive one before an unresponsive one (silence.go), the lower
// cost (or load, RTTs alike), and rnd's lowest bit on a tie.
func pickPair(bs []*Breaker, i, j int, now int64, rnd uint64) int {
	switch iok, jok := bs[i].Available(now), bs[j].Available(now); {
	case iok && jok:
		if better(bs[j], bs[i], now, rnd) {
			i, j = j, i
		}
	case iok:
		j = -1
	case jok:
		i, j = j, -1
	default:
		return -1
	}
	if bs[i].take(now) {
		return i
	}
	if j >= 0 && bs[j].take(now) {
		return j
	}
	return -1
}

// better reports whether b should take a request before a, both
// available at now (see pickPair).
func better(b, a *Breaker, now int64, rnd uint64) bool {
	if pa, pb := a.phase.Load() == phaseEjected, b.phase.Load() == phaseEjected; pa != pb {
		return pb
	}
	ra, _, xa := a.read(now)
	rb, _, xb := b.read(now)
	ra, rb = remeasured(ra, xa, rb, xb)
	return beats(rb, ra, rnd)
}

// mix is splitmix64's step: a new random word from rnd.
func mix(rnd uint64) uint64 {
	z := rnd + 0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}
