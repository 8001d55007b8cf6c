package home

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var (
	origin  = Place{Home: "/srv/hyp", Machine: "m1", Host: "a"}
	moved   = Place{Home: "/srv/hyp-copy", Machine: "m1", Host: "a"}
	cloned  = Place{Home: "/srv/hyp", Machine: "m2", Host: "b"}
	renamed = Place{Home: "/srv/hyp", Machine: "m1", Host: "a2"}
)

// step is one start of a daemon on the home: at a place, with a config's gateway_id.
type step struct {
	at         Place
	configured string
	// want is the id sent as: "gen" for the generated id of the step before, "new" for a
	// generated id never seen before, else a literal.
	want     string
	replaced bool // the home took a new identity and says which one it gave up
	conflict bool
}

func TestGateway(t *testing.T) {
	tests := []struct {
		name   string
		legacy string // content of a gateway_id file from before bindings, "" for none
		steps  []step
	}{
		{"fresh home keeps its id", "", []step{{at: origin, want: "new"}, {at: origin, want: "gen"}}},
		{"configured id; the generated one is kept for later", "", []step{
			{at: origin, configured: "web-1", want: "web-1"}, {at: origin, want: "gen"}}},
		{"legacy id file is adopted", "0123abcd\n", []step{{at: origin, want: "0123abcd"}, {at: moved, want: "new", replaced: true}}},
		{"copy at another path takes a new id", "", []step{
			{at: origin, want: "new"}, {at: moved, want: "new", replaced: true}, {at: moved, want: "gen"}}},
		{"copy on another machine takes a new id", "", []step{{at: origin, want: "new"}, {at: cloned, want: "new", replaced: true}}},
		{"a new hostname on the same machine is no copy", "", []step{{at: origin, want: "new"}, {at: renamed, want: "gen"}, {at: renamed, want: "gen"}}},
		{"copy still naming the original's configured id fails until fixed", "", []step{
			{at: origin, configured: "web-1", want: "web-1"},
			{at: cloned, configured: "web-1", want: "web-1", conflict: true},
			{at: cloned, configured: "web-1", want: "web-1", conflict: true},
			{at: cloned, configured: "web-2", want: "web-2", replaced: true},
			{at: cloned, configured: "web-2", want: "web-2"},
		}},
		{"copy configured with the original's generated id conflicts", "0123abcd\n", []step{
			{at: origin, want: "0123abcd"}, {at: moved, configured: "0123abcd", want: "0123abcd", conflict: true}}},
		{"a copy given a distinct id never falls back to the original's generated one", "0123abcd\n", []step{
			{at: origin, want: "0123abcd"}, {at: moved, configured: "web-9", want: "web-9", replaced: true}, {at: moved, want: "gen"}}},
		{"configured id changed in place", "", []step{
			{at: origin, configured: "web-1", want: "web-1"}, {at: origin, configured: "web-2", want: "web-2"}, {at: cloned, configured: "web-1", want: "web-1", replaced: true}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.legacy != "" {
				if err := os.WriteFile(GatewayIDFile(dir), []byte(tc.legacy), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			seen := map[string]bool{}
			gen := func() string { b, _ := os.ReadFile(GatewayIDFile(dir)); return strings.TrimSpace(string(b)) }
			prev := gen()
			var lastAt Place // of the last step that did not conflict
			for i, s := range tc.steps {
				before, _ := os.ReadFile(GatewayBindingFile(dir))
				id, err := Gateway(dir, s.configured, s.at)
				if s.conflict {
					if !errors.Is(err, ErrGatewayConflict) || !strings.Contains(err.Error(), GatewayBindingFile(dir)) || id.ID != s.want {
						t.Fatalf("step %d: got %+v, %v; want a conflict naming the binding file", i, id, err)
					}
					if after, _ := os.ReadFile(GatewayBindingFile(dir)); string(after) != string(before) {
						t.Fatalf("step %d: a conflict rewrote the binding", i)
					}
					continue
				}
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				want := s.want
				switch want {
				case "gen":
					want = prev
				case "new":
					want = gen()
					if seen[want] {
						t.Fatalf("step %d: generated id %s again", i, want)
					}
				}
				if id.ID != want {
					t.Fatalf("step %d: id %q, want %q", i, id.ID, want)
				}
				if (id.Replaced != nil) != s.replaced {
					t.Fatalf("step %d: replaced %+v, want %v", i, id.Replaced, s.replaced)
				}
				// A copy's new generated id, too, is one never seen, so that dropping the
				// config's gateway_id later cannot fall back to the original's.
				if id.Replaced != nil && (id.Replaced.OldPlace != lastAt || id.Replaced.OldID == id.ID || gen() == prev || seen[gen()]) {
					t.Fatalf("step %d: replaced %+v (generated id %s, before %s)", i, id.Replaced, gen(), prev)
				}
				for _, f := range []string{GatewayIDFile(dir), GatewayBindingFile(dir)} {
					if st, err := os.Stat(f); err != nil || st.Mode().Perm() != 0o600 {
						t.Fatalf("step %d: %s: %v %v, want mode 0600", i, f, st.Mode(), err)
					}
				}
				prev, lastAt = gen(), s.at
				seen[prev] = true
			}
		})
	}
}

func TestGatewayRemovingTheBindingAdopts(t *testing.T) {
	dir := t.TempDir()
	first, err := Gateway(dir, "web-1", origin)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Gateway(dir, "web-1", cloned); !errors.Is(err, ErrGatewayConflict) {
		t.Fatalf("no conflict: %v", err)
	}
	if err := os.Remove(GatewayBindingFile(dir)); err != nil {
		t.Fatal(err)
	}
	id, err := Gateway(dir, "web-1", cloned)
	if err != nil || id.ID != first.ID || id.Replaced != nil {
		t.Fatalf("after removing the binding: %+v, %v", id, err)
	}
}

func TestGatewayRefusesBadFiles(t *testing.T) {
	tests := []struct {
		name, id, binding, configured, err string
	}{
		{"bad id file", "not/an/id\n", "", "", "gateway_id"},
		{"corrupt binding", "0123abcd\n", "{", "", "remove it"},
		{"bad configured id", "", "", ".web", "gateway_id"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.id != "" {
				if err := os.WriteFile(GatewayIDFile(dir), []byte(tc.id), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if tc.binding != "" {
				if err := os.WriteFile(GatewayBindingFile(dir), []byte(tc.binding), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := Gateway(dir, tc.configured, origin); err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("err %v, want one containing %q", err, tc.err)
			}
		})
	}
}

func TestPlaceOf(t *testing.T) {
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(home, link); err != nil {
		t.Fatal(err)
	}
	idFile := filepath.Join(dir, "machine-id")
	if err := os.WriteFile(idFile, []byte("abc\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	host := func(h string) func() (string, error) { return func() (string, error) { return h, nil } }
	noHost := func() (string, error) { return "", errors.New("no hostname") }
	missing := filepath.Join(dir, "missing")

	a, err := placeOf(home, []string{missing, idFile}, host("h1"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		home     string
		idFiles  []string
		hostname func() (string, error)
		same     bool // the same place as a
		err      bool
	}{
		{"through a symlink", link, []string{idFile}, host("h1"), true, false},
		{"hostname changed, machine id kept", home, []string{idFile}, host("h2"), true, false},
		{"another machine id", home, []string{missing}, host("h1"), false, false},
		{"no machine id and no hostname", home, []string{missing}, noHost, false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := placeOf(tc.home, tc.idFiles, tc.hostname)
			if (err != nil) != tc.err {
				t.Fatalf("err %v", err)
			}
			if err != nil {
				return
			}
			if same := p.Home == a.Home && p.Machine == a.Machine; same != tc.same {
				t.Fatalf("%+v vs %+v: same %v, want %v", p, a, same, tc.same)
			}
			if strings.Contains(p.Machine, "abc") {
				t.Fatalf("the raw machine id leaks: %+v", p)
			}
		})
	}
}
