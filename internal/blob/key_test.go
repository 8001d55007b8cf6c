package blob

import (
	"net/url"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

func TestKey(t *testing.T) {
	cases := []struct {
		dataset, partition string
		first, last        int64
		f                  Format
		want               string
	}{
		{"logs", "source=web", 1, 100, Parquet,
			"logs/source=web/part-00000000000000000001-00000000000000000100.parquet"},
		{"logs", "source=web", 0, 9223372036854775807, JSONL,
			"logs/source=web/part-00000000000000000000-09223372036854775807.jsonl.gz"},
		{"traces", "gateway=abc123/source=web", 5, 6, Parquet,
			"traces/gateway=abc123/source=web/part-00000000000000000005-00000000000000000006.parquet"},
		{"logs", "source=a/b", 1, 1, Parquet, "logs/source=a%2Fb/part-00000000000000000001-00000000000000000001.parquet"},
		{"logs", "gateway=g/source=x/source=y", 1, 1, Parquet,
			"logs/gateway=g/source=x%2Fsource%3Dy/part-00000000000000000001-00000000000000000001.parquet"},
		{"logs", "source=..", 1, 1, Parquet, "logs/source=%2E./part-00000000000000000001-00000000000000000001.parquet"},
		{"logs", "source=.hidden", 1, 1, Parquet, "logs/source=%2Ehidden/part-00000000000000000001-00000000000000000001.parquet"},
		{"logs", "source=x.y-z_1", 1, 1, Parquet, "logs/source=x.y-z_1/part-00000000000000000001-00000000000000000001.parquet"},
		{"logs", "source=a b", 1, 1, Parquet, "logs/source=a%20b/part-00000000000000000001-00000000000000000001.parquet"},
		{"logs", "source=café", 1, 1, Parquet, "logs/source=caf%C3%A9/part-00000000000000000001-00000000000000000001.parquet"},
		{"logs", "source=100%~", 1, 1, Parquet, "logs/source=100%25%7E/part-00000000000000000001-00000000000000000001.parquet"},
		{"logs", "source=", 1, 1, Parquet, "logs/source=/part-00000000000000000001-00000000000000000001.parquet"},
	}
	for _, c := range cases {
		if got := Key(c.dataset, c.partition, c.first, c.last, c.f, LayoutPlain); got != c.want {
			t.Errorf("Key(%q, %q) =\n %s\nwant\n %s", c.dataset, c.partition, got, c.want)
		}
	}
}

func TestKeyLongValueIsHashed(t *testing.T) {
	long := strings.Repeat("é", 100) // 200 bytes, 600 once escaped
	a := Key("logs", "source="+long, 1, 2, Parquet, LayoutPlain)
	b := Key("logs", "source="+long[:198]+"è", 1, 2, Parquet, LayoutPlain)
	if a == b {
		t.Fatal("two long sources share a key")
	}
	seg := strings.Split(a, "/")[1]
	if !strings.HasPrefix(seg, "source=~h") || len(seg) > maxSegment {
		t.Fatalf("long source gave segment %q", seg)
	}
}

// checkSourceKey holds one key to what the rest of the system relies on: the partition is
// exactly one safe path segment, Hive readers decode it back to the source, and nothing
// else in the key moves.
func checkSourceKey(t interface {
	Helper()
	Fatalf(string, ...any)
}, source, key string) {
	t.Helper()
	parts := strings.Split(key, "/")
	if len(parts) != 3 || parts[0] != "logs" || !strings.HasPrefix(parts[2], "part-") {
		t.Fatalf("source %q: key %q is not logs/<one segment>/part-...", source, key)
	}
	seg := parts[1]
	if len(seg) > maxSegment {
		t.Fatalf("source %q: segment of %d bytes", source, len(seg))
	}
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("_.-%=~", c) >= 0) {
			t.Fatalf("source %q: segment %q holds byte %q", source, seg, c)
		}
	}
	v, ok := strings.CutPrefix(seg, "source=")
	if !ok {
		t.Fatalf("source %q: segment %q", source, seg)
	}
	if strings.HasPrefix(v, "~h") {
		return
	}
	if strings.HasPrefix(v, ".") {
		t.Fatalf("source %q: value segment %q starts with a dot", source, v)
	}
	if got, err := url.PathUnescape(v); err != nil || got != source {
		t.Fatalf("source %q: segment %q decodes to %q, %v", source, seg, got, err)
	}
}

func TestKeyDistinctSources(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		gen := rapid.OneOf(rapid.String(), rapid.StringMatching(`[a-z./ %~=é-]{0,12}`), rapid.StringN(0, 300, 300))
		a, b := gen.Draw(t, "a"), gen.Draw(t, "b")
		ka, kb := Key("logs", "source="+a, 1, 2, Parquet, LayoutPlain), Key("logs", "source="+b, 1, 2, Parquet, LayoutPlain)
		checkSourceKey(t, a, ka)
		checkSourceKey(t, b, kb)
		if a != b && ka == kb {
			t.Fatalf("sources %q and %q share key %s", a, b, ka)
		}
	})
}

// FuzzKey feeds arbitrary source values (they come from ingested rows) through Key.
func FuzzKey(f *testing.F) {
	for _, s := range []string{"web", "", "a/b", "..", ".", "/../../etc", "a b", "café", "%2F", "~h00", "source=x", "\x00\xff", strings.Repeat("é", 100)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, source string) {
		checkSourceKey(t, source, Key("logs", "source="+source, 1, 2, Parquet, LayoutPlain))
		gk := Key("logs", "gateway=abc/source="+source, 1, 2, Parquet, LayoutPlain)
		want := "logs/gateway=abc/" + strings.TrimPrefix(Key("logs", "source="+source, 1, 2, Parquet, LayoutPlain), "logs/")
		if gk != want {
			t.Fatalf("gateway key %q, want %q", gk, want)
		}
	})
}

// In the reserved layout every directory key is hyp's, so a Hive-aware reader's partition
// columns (`_hyp_source`, `_hyp_gateway`) never stand in for a row's own `source` or
// `gateway`; values are escaped exactly as in the plain layout.
func TestKeyReserved(t *testing.T) {
	for _, c := range []struct{ partition, want string }{
		{"source=web", "logs/_hyp_source=web/part-00000000000000000001-00000000000000000002.parquet"},
		{"gateway=abc123/source=a/b", "logs/_hyp_gateway=abc123/_hyp_source=a%2Fb/part-00000000000000000001-00000000000000000002.parquet"},
	} {
		if got := Key("logs", c.partition, 1, 2, Parquet, LayoutReserved); got != c.want {
			t.Errorf("Key(%q) = %s, want %s", c.partition, got, c.want)
		}
	}
	long := strings.Repeat("é", 100)
	if seg := strings.Split(Key("logs", "source="+long, 1, 2, Parquet, LayoutReserved), "/")[1]; !strings.HasPrefix(seg, "_hyp_source=~h") || len(seg) > maxSegment {
		t.Fatalf("a long source gave segment %q", seg)
	}
}
