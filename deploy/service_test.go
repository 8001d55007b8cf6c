package deploy

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hyp-project/hyp/internal/config"
	"github.com/hyp-project/hyp/internal/testutil/hypbin"
)

// hypBin is the hyp binary, built once for the tests that run it.
var hypBin string

func TestMain(m *testing.M) { hypbin.Main("../cmd/hyp", &hypBin, nil, m.Run) }

// unit is a systemd unit file: section -> key -> values in order (keys may repeat).
type unit map[string]map[string][]string

func readUnit(t *testing.T, path string) unit {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	u := unit{}
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
		case line[0] == '[' && line[len(line)-1] == ']':
			section = line[1 : len(line)-1]
			u[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("%s:%d: not a key=value in a section: %q", path, n, line)
			}
			u[section][k] = append(u[section][k], v)
		}
	}
	return u
}

func (u unit) get(section, key string) string {
	vs := u[section][key]
	if len(vs) == 0 {
		return ""
	}
	return vs[len(vs)-1]
}

// hardening is what every unit must set, as the brief for running hyp as a service asks.
var hardening = map[string]string{
	"User": "hyp", "Group": "hyp",
	"NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes",
	"PrivateDevices": "yes", "ProtectKernelTunables": "yes", "ProtectKernelModules": "yes",
	"ProtectControlGroups": "yes", "RestrictSUIDSGID": "yes",
	"Restart": "on-failure", "KillSignal": "SIGTERM", "ExecReload": "/bin/kill -HUP $MAINPID",
}

// drainBudget is the longest a SIGTERM drain waits on requests and the final flush
// (internal/daemon's shutdown context); TimeoutStopSec must leave it room.
const drainBudget = 30 * time.Second

var units = []struct {
	file, sub, config string
}{
	{"systemd/hyp.service", "daemon", "etc/hyp.yaml"},
	{"systemd/hyp-server.service", "server", "etc/server.yaml"},
}

// helpFlags are the long flags `hyp SUB --help` lists, its global ones included.
func helpFlags(t *testing.T, sub string) []string {
	t.Helper()
	out, err := exec.Command(hypBin, sub, "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("hyp %s --help: %v\n%s", sub, err, out)
	}
	var flags []string
	for _, m := range regexp.MustCompile(`(?m)^\s+(?:-\w, )?--([a-z][a-z-]*)`).FindAllStringSubmatch(string(out), -1) {
		flags = append(flags, m[1])
	}
	if !slices.Contains(flags, "home") {
		t.Fatalf("hyp %s --help lists no --home; read %v from:\n%s", sub, flags, out)
	}
	return flags
}

func TestUnits(t *testing.T) {
	for _, c := range units {
		t.Run(filepath.Base(c.file), func(t *testing.T) {
			u := readUnit(t, c.file)
			for k, want := range hardening {
				if got := u.get("Service", k); got != want {
					t.Errorf("[Service] %s=%q, want %q", k, got, want)
				}
			}
			if u.get("Service", "LimitNOFILE") == "" {
				t.Error("no LimitNOFILE")
			}
			if u.get("Install", "WantedBy") != "multi-user.target" {
				t.Errorf("WantedBy=%q, want multi-user.target", u.get("Install", "WantedBy"))
			}
			stop, err := time.ParseDuration(u.get("Service", "TimeoutStopSec") + "s")
			if err != nil || stop < 2*drainBudget {
				t.Errorf("TimeoutStopSec=%q: want at least %v, twice the drain's budget", u.get("Service", "TimeoutStopSec"), 2*drainBudget)
			}

			args := strings.Fields(u.get("Service", "ExecStart"))
			if len(args) < 2 || args[0] != "/usr/local/bin/hyp" || args[1] != c.sub {
				t.Fatalf("ExecStart %q, want /usr/local/bin/hyp %s ...", args, c.sub)
			}
			accepted := helpFlags(t, c.sub)
			flags := map[string]string{}
			for i := 2; i < len(args); i += 2 {
				name, ok := strings.CutPrefix(args[i], "--")
				if !ok || i+1 >= len(args) || !slices.Contains(accepted, name) {
					t.Fatalf("ExecStart: %q is not a flag `hyp %s` takes with a value (it takes %v)", args[i:], c.sub, accepted)
				}
				flags[name] = args[i+1]
			}
			home := flags["home"]
			if home == "" || !slices.Contains(strings.Fields(u.get("Service", "ReadWritePaths")), home) {
				t.Errorf("--home %q is not in ReadWritePaths=%q", home, u.get("Service", "ReadWritePaths"))
			}
			if sd := u.get("Service", "StateDirectory"); "/var/lib/"+sd != home {
				t.Errorf("StateDirectory=%q does not create --home %q", sd, home)
			}
			if want := "/etc/hyp/" + filepath.Base(c.config); flags["config"] != want {
				t.Errorf("--config %q, want %s (what make install puts there from deploy/%s)", flags["config"], want, c.config)
			}

			// The config the unit names loads, and its local exports land where the unit may write.
			cfg, err := config.Load(home, c.config, config.Checks{})
			if err != nil {
				t.Fatalf("deploy/%s: %v", c.config, err)
			}
			for name, s := range cfg.Sinks {
				if s.Destination.Type == "local-fs" && !strings.HasPrefix(s.Destination.Path, home+"/") {
					t.Errorf("sink %s exports to %s, outside --home %s, which the unit cannot write", name, s.Destination.Path, home)
				}
			}
		})
	}
}

// TestUnitsVerify runs systemd's own checker, which names unknown keys and bad values
// that the parse above would take at face value.
func TestUnitsVerify(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatal("no systemd-analyze: run `make test` (it installs Debian's systemd package) or install systemd")
	}
	dir := t.TempDir()
	for _, c := range units {
		data, err := os.ReadFile(c.file)
		if err != nil {
			t.Fatal(err)
		}
		// verify wants ExecStart's binary to exist, so it gets the one just built.
		path := filepath.Join(dir, filepath.Base(c.file))
		if err := os.WriteFile(path, bytes.ReplaceAll(data, []byte("/usr/local/bin/hyp"), []byte(hypBin)), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(analyze, "verify", path).CombinedOutput()
		if err != nil || len(bytes.TrimSpace(out)) > 0 {
			t.Errorf("systemd-analyze verify %s: %v\n%s", c.file, err, out)
		}
	}
}

func TestMakeInstall(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Fatal("no make")
	}
	dest := t.TempDir()
	install := func() {
		t.Helper()
		// BIN is the binary TestMain built, so the install's build step finds it up to date.
		cmd := exec.Command("make", "-s", "-C", "..", "install", "DESTDIR="+dest, "PREFIX=/opt/hyp", "BIN="+hypBin)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("make install: %v\n%s", err, out)
		}
	}
	install()
	want := map[string]os.FileMode{
		"opt/hyp/bin/hyp":                                   0o755,
		"lib/systemd/system/hyp.service":                    0o644,
		"lib/systemd/system/hyp-server.service":             0o644,
		"etc/hyp/hyp.yaml":                                  0o644,
		"etc/hyp/server.yaml":                               0o644,
		"opt/hyp/share/hyp/prometheus/hyp-alerts.yaml":      0o644,
		"opt/hyp/share/hyp/prometheus/hyp-alerts_test.yaml": 0o644,
		"opt/hyp/share/hyp/grafana/hyp.json":                0o644,
	}
	for rel, mode := range want {
		fi, err := os.Stat(filepath.Join(dest, rel))
		if err != nil {
			t.Error(err)
			continue
		}
		if fi.Mode().Perm() != mode {
			t.Errorf("%s: mode %v, want %v", rel, fi.Mode().Perm(), mode)
		}
	}
	for _, c := range units {
		u := readUnit(t, filepath.Join(dest, "lib/systemd/system", filepath.Base(c.file)))
		if got := strings.Fields(u.get("Service", "ExecStart"))[0]; got != "/opt/hyp/bin/hyp" {
			t.Errorf("installed %s runs %s, want the installed /opt/hyp/bin/hyp", filepath.Base(c.file), got)
		}
	}

	// An upgrade keeps the operator's config.
	mine := filepath.Join(dest, "etc/hyp/hyp.yaml")
	if err := os.WriteFile(mine, []byte("sinks: {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	install()
	if got, _ := os.ReadFile(mine); string(got) != "sinks: {}\n" {
		t.Errorf("a second make install replaced /etc/hyp/hyp.yaml with:\n%s", got)
	}
}
