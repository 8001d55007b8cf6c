package partition

import (
	"strings"
	"testing"
)

func TestSegmentRoundTrip(t *testing.T) {
	cases := []string{"web", "a b", "a_b", "a/b", "..", ".hidden", "x.y", "café", "~7e", "a%2Fb", strings.Repeat("z", 190)}
	seen := map[string]string{}
	for _, s := range cases {
		seg := Segment(s)
		if strings.ContainsAny(seg, "/\\%") || seg == "." || seg == ".." {
			t.Fatalf("segment %q for %q is not a safe path segment", seg, s)
		}
		if prev, dup := seen[seg]; dup {
			t.Fatalf("%q and %q share segment %q", prev, s, seg)
		}
		seen[seg] = s
		got, ok := SourceFromSegment(seg)
		if !ok || got != s {
			t.Fatalf("SourceFromSegment(%q) = %q, %v; want %q", seg, got, ok, s)
		}
	}
}

func TestSegmentLongValuesHash(t *testing.T) {
	long := strings.Repeat("é", 100) // 200 bytes, 600 escaped
	seg := Segment(long)
	if !strings.HasPrefix(seg, "source~h") || len(seg) > maxSegment {
		t.Fatalf("long value segment %q", seg)
	}
	if Segment(long+"x") == seg {
		t.Fatal("different long values share a segment")
	}
}

func TestValidateSource(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{"web", true}, {"", false}, {"a\nb", false}, {strings.Repeat("a", 201), false}, {"\xff", false}, {"ü", true},
	} {
		if err := ValidateSource(tc.in); (err == nil) != tc.ok {
			t.Errorf("ValidateSource(%q) = %v", tc.in, err)
		}
	}
}

func FuzzSegment(f *testing.F) {
	f.Add("web")
	f.Add("a~b")
	f.Fuzz(func(t *testing.T, s string) {
		seg := Segment(s)
		if strings.HasPrefix(seg, "source~h") {
			return
		}
		got, ok := SourceFromSegment(seg)
		if !ok || got != s {
			t.Fatalf("round trip %q -> %q -> %q", s, seg, got)
		}
	})
}
