package home

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hyp-project/hyp/internal/fsutil"
	"github.com/hyp-project/hyp/internal/partition"
)

// ErrGatewayConflict means the config's gateway_id is the id of the home this one was copied
// from: sending under it would make two machines share one gateway's ledger on the server,
// which drops the second machine's rows as duplicates.
var ErrGatewayConflict = errors.New("gateway identity conflict")

// GatewayIDFile holds the gateway id generated once for the home (SPEC 2).
func GatewayIDFile(home string) string { return filepath.Join(home, "gateway_id") }

// GatewayBindingFile records the place the generated id belongs to (see Gateway).
func GatewayBindingFile(home string) string { return filepath.Join(home, "gateway_binding.json") }

// Place is where a home is in use: its canonical absolute path and the machine.
type Place struct {
	Home string `json:"home"`
	// Machine is a digest of /etc/machine-id (else of the hostname), never the id itself:
	// machine-id(5) asks that the raw id stay confidential, and log lines carry this.
	Machine string `json:"machine"`
	// Host is the hostname, only to help a human reading a log line or the file.
	Host string `json:"host,omitempty"`
}

func (p Place) String() string {
	return fmt.Sprintf("%s on machine %s (host %q)", p.Home, p.Machine, p.Host)
}

// CurrentPlace returns the place of home on this machine. The machine is /etc/machine-id,
// else /var/lib/dbus/machine-id (where systems without systemd keep the same id), else the
// hostname.
func CurrentPlace(home string) (Place, error) {
	return placeOf(home, []string{"/etc/machine-id", "/var/lib/dbus/machine-id"}, os.Hostname)
}

func placeOf(home string, idFiles []string, hostname func() (string, error)) (Place, error) {
	// Symlinks are resolved so that one home reached through two names stays one place.
	dir, err := filepath.EvalSymlinks(home)
	if err != nil {
		return Place{}, fmt.Errorf("resolve home %s: %w", home, err)
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return Place{}, fmt.Errorf("resolve home %s: %w", home, err)
	}
	host, herr := hostname()
	var source string
	for _, f := range idFiles {
		if b, err := os.ReadFile(f); err == nil && len(strings.TrimSpace(string(b))) > 0 {
			source = "machine-id:" + strings.TrimSpace(string(b))
			break
		}
	}
	if source == "" {
		if herr != nil || host == "" {
			return Place{}, fmt.Errorf("no machine id (%s) and no hostname: %v", strings.Join(idFiles, ", "), herr)
		}
		source = "hostname:" + host
	}
	sum := sha256.Sum256([]byte("hyp.gateway.machine.v1\x00" + source))
	return Place{Home: dir, Machine: hex.EncodeToString(sum[:8]), Host: host}, nil
}

// binding is the content of GatewayBindingFile.
type binding struct {
	// GatewayID is the generated id of GatewayIDFile this binding covers; a binding for
	// another id (the file was replaced by hand) counts as no binding.
	GatewayID string `json:"gateway_id"`
	// Configured is the config's gateway_id last used at this place, "" for none: a copy
	// that still names it would send as the original.
	Configured string    `json:"configured_gateway_id,omitempty"`
	Place      Place     `json:"place"`
	BoundAt    time.Time `json:"bound_at"`
}

// Identity is what a home sends as.
type Identity struct {
	ID string
	// Replaced is set when the home turned out to be a copy and took a new generated id:
	// the identity and place it was copied from, for the caller's warning.
	Replaced *Replaced
}

// Replaced is the identity a copied home gave up.
type Replaced struct {
	OldID    string
	OldPlace Place
}

// Gateway returns the gateway id home sends as: configured (the config's gateway_id) when
// set, else the id generated once into GatewayIDFile.
//
// The generated id is bound to the place it was created for (GatewayBindingFile), so a home
// copied to another path or machine (a cloned disk image, a backup restored elsewhere) does
// not go on sending as the original, whose ledger on the server would drop its rows as
// duplicates. At another place than its binding, the home takes a new generated id and
// returns the old one in Replaced. When configured names the original's identity there, a
// new id cannot help: Gateway then returns the configured id together with an error wrapping
// ErrGatewayConflict, which stays until the operator sets a distinct gateway_id or, for a
// home moved on purpose, removes GatewayBindingFile. An id file without a binding (written
// before bindings existed, or replaced by hand) is adopted and bound to here.
//
// Both files are written atomically with mode 0600. The caller must hold the home's writer
// lock, so that no other process decides at the same time.
func Gateway(home, configured string, here Place) (Identity, error) {
	if configured != "" {
		if err := partition.ValidateGateway(configured); err != nil {
			return Identity{}, fmt.Errorf("gateway_id: %w", err)
		}
	}
	gen, err := readGatewayID(home)
	if err != nil {
		return Identity{}, err
	}
	b, err := readBinding(home)
	if err != nil {
		return Identity{}, err
	}
	pick := func(gen string) string {
		if configured != "" {
			return configured
		}
		return gen
	}
	switch {
	case gen == "":
		if gen, err = newGatewayID(home); err != nil {
			return Identity{}, err
		}
	case b == nil || b.GatewayID != gen:
		// Adopted: tighten an id file written before SPEC 2's 0600 rule.
		if err := os.Chmod(GatewayIDFile(home), 0o600); err != nil {
			return Identity{}, fmt.Errorf("gateway id: %w", err)
		}
	case b.Place.Home == here.Home && b.Place.Machine == here.Machine:
		if b.Configured == configured && b.Place == here {
			return Identity{ID: pick(gen)}, nil
		}
		// Same place with a new configured id or hostname: only the record changes.
	case configured != "" && (configured == b.Configured || configured == b.GatewayID):
		return Identity{ID: configured}, fmt.Errorf("%w: this home is %s, but it was set up at %s, where it sent as gateway %q, "+
			"the gateway_id this config still sets: two senders would share one gateway's ledger on the server. "+
			"Set a distinct gateway_id in the config, or, if the home was moved and the original no longer sends, remove %s",
			ErrGatewayConflict, here, b.Place, configured, GatewayBindingFile(home))
	default:
		// A copy: a fresh generated id, so that it never falls back to the original's.
		old := Replaced{OldID: b.GatewayID, OldPlace: b.Place}
		if b.Configured != "" {
			old.OldID = b.Configured // what the original sent as
		}
		if gen, err = newGatewayID(home); err != nil {
			return Identity{}, err
		}
		if err := writeBinding(home, binding{GatewayID: gen, Configured: configured, Place: here}); err != nil {
			return Identity{}, err
		}
		return Identity{ID: pick(gen), Replaced: &old}, nil
	}
	if err := writeBinding(home, binding{GatewayID: gen, Configured: configured, Place: here}); err != nil {
		return Identity{}, err
	}
	return Identity{ID: pick(gen)}, nil
}

// readGatewayID returns the generated id, "" when there is none yet.
func readGatewayID(home string) (string, error) {
	path := GatewayIDFile(home)
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("gateway id: %w", err)
	}
	id := strings.TrimSpace(string(data))
	if err := partition.ValidateGateway(id); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return id, nil
}

func newGatewayID(home string) (string, error) {
	var raw [16]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", fmt.Errorf("create gateway id: %w", err)
	}
	id := hex.EncodeToString(raw[:])
	if err := fsutil.MkdirAllSync(home); err != nil {
		return "", fmt.Errorf("create gateway id: %w", err)
	}
	if err := fsutil.WriteFileAtomic(GatewayIDFile(home), []byte(id+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("create gateway id: %w", err)
	}
	return id, nil
}

// readBinding returns nil when there is no binding file. A file that does not parse is an
// error rather than "no binding": adopting would bind a possibly copied home to here.
func readBinding(home string) (*binding, error) {
	path := GatewayBindingFile(home)
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("gateway binding: %w", err)
	}
	var b binding
	if err := json.Unmarshal(data, &b); err != nil {
		return nil, fmt.Errorf("gateway binding %s: %w (remove it to bind the gateway id to this place again)", path, err)
	}
	return &b, nil
}

func writeBinding(home string, b binding) error {
	b.BoundAt = time.Now().UTC()
	data, err := json.MarshalIndent(b, "", "  ")
	if err != nil {
		return fmt.Errorf("gateway binding: %w", err)
	}
	if err := fsutil.WriteFileAtomic(GatewayBindingFile(home), append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("gateway binding: %w", err)
	}
	return nil
}
