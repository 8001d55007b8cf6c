package partition

import (
	"encoding/hex"
	"os"
	"path/filepath"
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
		got, ok := sourceFromSegment(seg)
		if !ok || got != s {
			t.Fatalf("sourceFromSegment(%q) = %q, %v; want %q", seg, got, ok, s)
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
		got, ok := sourceFromSegment(seg)
		if !ok || got != s {
			t.Fatalf("round trip %q -> %q -> %q", s, seg, got)
		}
	})
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name, gw, src, seg string
		ok                 bool
	}{
		{"source=web", "", "web", "source=web", true},
		{"source=a/b", "", "a/b", "source=a~2fb", true},
		{"gateway=g1/source=web", "g1", "web", "gateway=g1,source=web", true},
		{"gateway=g1/source=a,b", "g1", "a,b", "gateway=g1,source=a~2cb", true},
		{"gateway=/source=web", "", "", "", false},
		{"gateway=a.b/source=web", "a.b", "web", "gateway=a.b,source=web", true},
		{"gateway=.a/source=web", "", "", "", false},
		{"gateway=-a/source=web", "", "", "", false},
		{"gateway=a~b/source=web", "", "", "", false},
		{"gateway=g1", "", "", "", false},
		{"source=", "", "", "", false},
		{"web", "", "", "", false},
	} {
		gw, src, err := Parse(tc.name)
		if (err == nil) != tc.ok || gw != tc.gw || src != tc.src {
			t.Errorf("Parse(%q) = %q, %q, %v", tc.name, gw, src, err)
			continue
		}
		if !tc.ok {
			continue
		}
		if seg, _ := PathSegment(tc.name); seg != tc.seg {
			t.Errorf("PathSegment(%q) = %q, want %q", tc.name, seg, tc.seg)
		}
		if tc.gw != "" && GatewayName(tc.gw, tc.src) != tc.name {
			t.Errorf("GatewayName(%q, %q) = %q", tc.gw, tc.src, GatewayName(tc.gw, tc.src))
		}
	}
}

// sourceFromSegment reverses Segment for escaped (not hashed) segments; it proves the
// escaping reversible (SPEC 2), which the cache itself never needs: partition.json records
// the raw name.
func sourceFromSegment(seg string) (string, bool) {
	rest, ok := strings.CutPrefix(seg, "source=")
	if !ok {
		return "", false
	}
	out := make([]byte, 0, len(rest))
	for i := 0; i < len(rest); i++ {
		if rest[i] != '~' {
			out = append(out, rest[i])
			continue
		}
		if i+2 >= len(rest) {
			return "", false
		}
		v, err := hex.DecodeString(rest[i+1 : i+3])
		if err != nil {
			return "", false
		}
		out = append(out, v[0])
		i += 2
	}
	return string(out), true
}

func TestSanitizeSource(t *testing.T) {
	long := strings.Repeat("a", 199) + "é" // 201 bytes: the é does not fit
	for _, tc := range []struct{ in, want string }{
		{"", Unknown},
		{"checkout", "checkout"},
		{strings.Repeat("s", MaxSourceBytes), strings.Repeat("s", MaxSourceBytes)},
		{strings.Repeat("s", MaxSourceBytes+1), strings.Repeat("s", MaxSourceBytes)},
		{long, strings.Repeat("a", 199)},
		{"a\x00b", "a\uFFFDb"},
		{"tab\there\n", "tab\uFFFDhere\uFFFD"},
		{"del\x7f c1\u0085", "del\uFFFD c1\uFFFD"},
		{"bad\xffutf8", "bad\uFFFDutf8"},
		{strings.Repeat("\x00", 100), strings.Repeat("\uFFFD", MaxSourceBytes/3)},
	} {
		got := SanitizeSource(tc.in)
		if got != tc.want {
			t.Errorf("SanitizeSource(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if err := ValidateSource(got); err != nil {
			t.Errorf("SanitizeSource(%q) = %q, not a valid source: %v", tc.in, got, err)
		}
		if again := SanitizeSource(got); again != got {
			t.Errorf("SanitizeSource is not stable on %q: %q", got, again)
		}
	}
}

func FuzzSanitizeSource(f *testing.F) {
	f.Add("checkout")
	f.Add("a\x00b")
	f.Add(strings.Repeat("é", 150))
	f.Fuzz(func(t *testing.T, s string) {
		got := SanitizeSource(s)
		if err := ValidateSource(got); err != nil {
			t.Fatalf("SanitizeSource(%q) = %q: %v", s, got, err)
		}
		if ValidateSource(s) == nil && got != s {
			t.Fatalf("valid source %q changed to %q", s, got)
		}
	})
}

// TestPathSegmentFitsAFileName: the longest gateway id with the longest source still names
// a directory and a watermark file a filesystem takes, and two such partitions never share
// one.
func TestPathSegmentFitsAFileName(t *testing.T) {
	gw := strings.Repeat("g", 128)
	src := strings.Repeat("s", 199)
	a, err := PathSegment("gateway=" + gw + "/source=" + src + "a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := PathSegment("gateway=" + gw + "/source=" + src + "b")
	if err != nil {
		t.Fatal(err)
	}
	if a == b {
		t.Fatalf("two partitions share %q", a)
	}
	for _, s := range []string{a, b} {
		if n := len("." + s + ".json.tmp-1234567890"); n > 255 {
			t.Errorf("%q makes %d-byte file names", s, n)
		}
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, a+".json"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if got, _ := PathSegment("gateway=g1/source=web"); got != "gateway=g1,source=web" {
		t.Errorf("a short name changed to %q", got)
	}
}
