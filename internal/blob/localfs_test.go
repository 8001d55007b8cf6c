package blob

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeTemp writes data to a new temp file of d, as an exporter would.
func writeTemp(t *testing.T, d Destination, data string) string {
	t.Helper()
	f, err := CreateTemp(d)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(data); err != nil {
		t.Fatal(err)
	}
	return f.Name()
}

func TestLocalFSPut(t *testing.T) {
	root := filepath.Join(t.TempDir(), "exports") // created by the first Put
	d := NewLocalFS(root)
	ctx := context.Background()
	obj := Object{Key: Key("logs", "source=a/b", 1, 10, Parquet, LayoutPlain), UnitID: "u1", Rows: 10, FirstSeq: 1, LastSeq: 10}

	tmp := writeTemp(t, d, "first")
	if !strings.HasPrefix(tmp, d.TempDir()+string(filepath.Separator)) {
		t.Fatalf("temp file %s is not under %s", tmp, d.TempDir())
	}
	if err := d.Put(ctx, obj, tmp); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(root, "logs", "source=a%2Fb", "part-00000000000000000001-00000000000000000010.parquet")
	if got, err := os.ReadFile(dst); err != nil || string(got) != "first" {
		t.Fatalf("read %s: %q, %v", dst, got, err)
	}
	if st, err := os.Stat(dst); err != nil || st.Mode().Perm() != 0o600 { // private: exports hold telemetry (SPEC 2)
		t.Fatalf("stat %s: %v, %v", dst, st.Mode(), err)
	}
	if _, err := os.Stat(tmp); !os.IsNotExist(err) {
		t.Fatalf("temp file still there after Put: %v", err)
	}

	// A retry of the same unit (same key, same rows) replaces the file and succeeds.
	if err := d.Put(ctx, obj, writeTemp(t, d, "again")); err != nil {
		t.Fatalf("re-put: %v", err)
	}
	if got, _ := os.ReadFile(dst); string(got) != "again" {
		t.Fatalf("after re-put: %q", got)
	}

	// A crash leftover sits in the hidden temp dir, where globs for finished files miss it.
	leftover := writeTemp(t, d, "partial")
	if err := os.Rename(leftover, filepath.Join(d.TempDir(), "part-1-2.parquet")); err != nil {
		t.Fatal(err)
	}
	matches, err := filepath.Glob(filepath.Join(root, "*", "*", "*.parquet"))
	if err != nil || len(matches) != 1 || matches[0] != dst {
		t.Fatalf("glob = %v, %v; want only %s", matches, err, dst)
	}
	if err := d.Clean(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(d.TempDir()); !os.IsNotExist(err) {
		t.Fatalf("Clean left %s: %v", d.TempDir(), err)
	}
	if _, err := os.Stat(dst); err != nil {
		t.Fatalf("Clean touched a finished file: %v", err)
	}
}

func TestLocalFSPutRefuses(t *testing.T) {
	d := NewLocalFS(t.TempDir())
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	cases := []struct {
		name string
		ctx  context.Context
		key  string
		path string
	}{
		{"escaping key", context.Background(), "../outside/part.parquet", ""},
		{"absolute key", context.Background(), "/etc/part.parquet", ""},
		{"empty segment", context.Background(), "logs//part.parquet", ""},
		{"temp dir key", context.Background(), ".hyp-tmp/x.parquet", ""},
		{"missing file", context.Background(), "logs/source=x/part.parquet", filepath.Join(t.TempDir(), "nope")},
		{"canceled", canceled, "logs/source=x/part.parquet", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := c.path
			if path == "" {
				path = writeTemp(t, d, "x")
			}
			if err := d.Put(c.ctx, Object{Key: c.key, UnitID: "u"}, path); err == nil {
				t.Fatal("Put succeeded")
			}
		})
	}
	entries, err := os.ReadDir(filepath.Dir(d.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != tempDirName {
			t.Errorf("refused Puts left %s in the root", e.Name())
		}
	}
}
