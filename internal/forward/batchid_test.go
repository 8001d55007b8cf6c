package forward

import (
	"math"
	"regexp"
	"testing"

	"pgregory.net/rapid"
)

// TestBatchIDGolden pins the id forever: a server may have deduped on these values, so a
// failure here means an upgrade would re-deliver chunks in flight. Fix the code, not the
// test. The values were cross-checked with an independent Python implementation of the
// documented encoding.
func TestBatchIDGolden(t *testing.T) {
	for _, tc := range []struct {
		gateway, dataset, partition string
		first, last                 int64
		want                        string
		incarnation                 string
	}{
		{"gw-1", "logs", "source=web", 11, 13, "f2276d7c2c0cb0d49cbaaab8fe5bdea5", ""},
		{"", "", "", 0, 0, "0e20e4dfd1ab7e2c05b7a6d0edc16ce4", ""},
		{"gw-1", "logs", "source=café", 1, math.MaxInt64, "b05d0b581fba52ccdbc47dde7363c3f9", ""},
		// The incarnation is a fifth length-prefixed string, after the partition.
		{"gw-1", "logs", "source=web", 11, 13, "184d57fa6c985f818a7178b0b088d350", "0123456789abcdef0123456789abcdef"},
	} {
		if got := BatchID(tc.gateway, tc.incarnation, tc.dataset, tc.partition, tc.first, tc.last); got != tc.want {
			t.Errorf("BatchID(%q, %q, %q, %q, %d, %d) = %s, want %s", tc.gateway, tc.incarnation, tc.dataset, tc.partition, tc.first, tc.last, got, tc.want)
		}
	}
}

func TestBatchIDDistinct(t *testing.T) {
	type in struct {
		g, d, p     string
		first, last int64
		i           string // incarnation
	}
	base := in{"gw", "logs", "source=web", 1, 2, ""}
	for _, tc := range []struct {
		name string
		a, b in
	}{
		{"boundary between gateway and dataset", in{"a", "bc", "source=x", 1, 2, ""}, in{"ab", "c", "source=x", 1, 2, ""}},
		{"boundary between dataset and partition", in{"g", "ab", "c", 1, 2, ""}, in{"g", "a", "bc", 1, 2, ""}},
		{"fields swapped", in{"x", "y", "source=z", 1, 2, ""}, in{"y", "x", "source=z", 1, 2, ""}},
		{"first and last swapped", in{"g", "d", "source=p", 1, 2, ""}, in{"g", "d", "source=p", 2, 1, ""}},
		{"gateway", base, in{"gw2", "logs", "source=web", 1, 2, ""}},
		{"dataset", base, in{"gw", "traces", "source=web", 1, 2, ""}},
		{"partition", base, in{"gw", "logs", "source=api", 1, 2, ""}},
		{"first", base, in{"gw", "logs", "source=web", 0, 2, ""}},
		{"last", base, in{"gw", "logs", "source=web", 1, 3, ""}},
		{"incarnation", base, in{"gw", "logs", "source=web", 1, 2, "0123abcd"}},
		{"two incarnations", in{"gw", "logs", "source=web", 1, 2, "a"}, in{"gw", "logs", "source=web", 1, 2, "b"}},
	} {
		a := BatchID(tc.a.g, tc.a.i, tc.a.d, tc.a.p, tc.a.first, tc.a.last)
		b := BatchID(tc.b.g, tc.b.i, tc.b.d, tc.b.p, tc.b.first, tc.b.last)
		if a == b {
			t.Errorf("%s: %+v and %+v share id %s", tc.name, tc.a, tc.b, a)
		}
	}
}

// TestBatchIDProperties: the id is a pure function of its five inputs, always 32 lowercase
// hex characters, and different inputs give different ids.
func TestBatchIDProperties(t *testing.T) {
	hex32 := regexp.MustCompile(`^[0-9a-f]{32}$`)
	rapid.Check(t, func(t *rapid.T) {
		str := rapid.StringN(0, 12, -1)
		g1, d1, p1 := str.Draw(t, "g1"), str.Draw(t, "d1"), str.Draw(t, "p1")
		f1, l1 := rapid.Int64().Draw(t, "f1"), rapid.Int64().Draw(t, "l1")
		g2, d2, p2 := str.Draw(t, "g2"), str.Draw(t, "d2"), str.Draw(t, "p2")
		f2, l2 := rapid.Int64().Draw(t, "f2"), rapid.Int64().Draw(t, "l2")
		a := BatchID(g1, "", d1, p1, f1, l1)
		if !hex32.MatchString(a) {
			t.Fatalf("id %q is not 32 lowercase hex characters", a)
		}
		if a != BatchID(g1, "", d1, p1, f1, l1) {
			t.Fatal("same inputs gave different ids")
		}
		same := g1 == g2 && d1 == d2 && p1 == p2 && f1 == f2 && l1 == l2
		if b := BatchID(g2, "", d2, p2, f2, l2); (a == b) != same {
			t.Fatalf("inputs equal=%v but ids %s and %s", same, a, b)
		}
	})
}
