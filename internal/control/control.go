// Package control owns the daemon's control socket (hyp.sock, mode 0600): the server that
// exposes a Node's state-changing operations (and the cache's listing a query pins: its
// files, and its unflushed rows as files the client stores) to CLI commands, and the client
// they use.
// Every state change a CLI makes while a daemon runs goes through here, so there is never a
// second writer. It never opens the cache itself.
package control

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/hyp-project/hyp/internal/cache"
	"github.com/hyp-project/hyp/internal/cluster"
	"github.com/hyp-project/hyp/internal/node"
	"github.com/hyp-project/hyp/internal/sink"
)

// API is what CLI commands call, served either by the daemon or by a local Node.
type API interface {
	Flush(ctx context.Context) error
	// Listing is the cache's live files and its rows not yet flushed, in files written
	// into dir (cache.Cache.Listing), for a reader that pinned the cache with cache.PinView.
	Listing(ctx context.Context, dir string) ([]cache.TableView, error)
	Compact(ctx context.Context, req node.CompactRequest) ([]cache.CompactResult, error)
	Prune(ctx context.Context, dryRun bool) ([]cache.PruneResult, error)
	Repair(ctx context.Context, dryRun bool) ([]cache.Repaired, error)
	Ingest(ctx context.Context, dataset, source string, body []byte) (cache.Result, error)
	RunSinks(ctx context.Context, instance string) ([]sink.RunResult, error)
	SinkStatus(ctx context.Context, instance string) ([]sink.InstanceStatus, error)
	PreviewSink(ctx context.Context, req sink.PreviewRequest) (sink.PreviewResult, error)
	Rewind(ctx context.Context, req sink.RewindRequest) (sink.RewindResult, error)
	MaintainSinks(ctx context.Context, req sink.MaintainRequest) ([]sink.MaintainResult, error)
}

// Local adapts a Node opened by the CLI itself.
type Local struct{ N *node.Node }

func (l Local) Flush(ctx context.Context) error { return l.N.Flush(ctx) }
func (l Local) Listing(ctx context.Context, dir string) ([]cache.TableView, error) {
	return l.N.Cache.Listing(ctx, func(name string, data []byte) (string, error) {
		return writeUnflushed(dir, name, bytes.NewReader(data))
	})
}

// writeUnflushed stores a listing's unflushed file name in dir and returns its path.
func writeUnflushed(dir, name string, r io.Reader) (string, error) {
	if name == "" || filepath.Base(name) != name || name == "." || name == ".." {
		return "", fmt.Errorf("unflushed file name %q is not a file name", name)
	}
	path := filepath.Join(dir, name)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", fmt.Errorf("unflushed file: %w", err)
	}
	_, err = io.Copy(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("unflushed file %s: %w", path, err)
	}
	return path, nil
}
func (l Local) Compact(ctx context.Context, req node.CompactRequest) ([]cache.CompactResult, error) {
	return l.N.Compact(ctx, req)
}
func (l Local) Prune(ctx context.Context, dryRun bool) ([]cache.PruneResult, error) {
	return l.N.Prune(ctx, dryRun)
}
func (l Local) Repair(ctx context.Context, dryRun bool) ([]cache.Repaired, error) {
	return l.N.Repair(ctx, dryRun)
}
func (l Local) Ingest(_ context.Context, dataset, source string, body []byte) (cache.Result, error) {
	return l.N.Ingest(dataset, source, body)
}
func (l Local) RunSinks(ctx context.Context, instance string) ([]sink.RunResult, error) {
	return l.N.RunSinks(ctx, instance)
}

func (l Local) SinkStatus(ctx context.Context, instance string) ([]sink.InstanceStatus, error) {
	return l.N.SinkStatus(ctx, instance)
}
func (l Local) PreviewSink(ctx context.Context, req sink.PreviewRequest) (sink.PreviewResult, error) {
	return l.N.PreviewSink(ctx, req)
}
func (l Local) Rewind(ctx context.Context, req sink.RewindRequest) (sink.RewindResult, error) {
	return l.N.Rewind(ctx, req)
}
func (l Local) MaintainSinks(ctx context.Context, req sink.MaintainRequest) ([]sink.MaintainResult, error) {
	return l.N.MaintainSinks(ctx, req)
}

type errorBody struct {
	Error   string `json:"error"`
	Line    int    `json:"line,omitempty"`
	Message string `json:"message"`
}

// pruneRequest is the body of prune and repair.
type pruneRequest struct {
	DryRun bool `json:"dry_run"`
}

type instanceRequest struct {
	Instance string `json:"instance"`
}

// Listen creates the socket with owner-only permissions. A socket file left by a dead
// daemon is replaced; one that still answers is refused.
func Listen(path string) (net.Listener, error) {
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return nil, fmt.Errorf("control socket %s is in use by a running daemon", path)
	}
	_ = os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("control socket: %w", err)
	}
	return ln, nil
}

// Handler serves n's operations; ingest is the daemon's ingest handler, mounted so that
// `hyp ingest` reaches the same code path as HTTP clients. srv, when not nil, is `hyp
// server`'s own (/v1/server/...).
func Handler(n *node.Node, ingest, srv http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/v1/ingest/", ingest)
	if srv != nil {
		mux.Handle("/v1/server/", srv)
	}
	mux.HandleFunc("GET /v1/ping", func(w http.ResponseWriter, r *http.Request) {
		ping := map[string]any{"pid": os.Getpid(), "home": n.Home}
		if err := n.Cache.Err(); err != nil {
			ping["cache_error"] = err.Error()
		}
		writeJSON(w, 200, ping)
	})
	mux.HandleFunc("POST /v1/flush", func(w http.ResponseWriter, r *http.Request) {
		if err := n.Flush(r.Context()); err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, 200, map[string]any{})
	})
	mux.HandleFunc("GET /v1/view", func(w http.ResponseWriter, r *http.Request) {
		// The files go first, each as a part the client stores (this process may not write
		// where the client reads: systemd's PrivateTmp), then the listing naming them.
		mw := multipart.NewWriter(w)
		w.Header().Set("Content-Type", "multipart/mixed; boundary="+mw.Boundary())
		tables, err := n.Cache.Listing(r.Context(), func(name string, data []byte) (string, error) {
			h := textproto.MIMEHeader{}
			h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": name}))
			h.Set("Content-Type", "application/vnd.apache.parquet")
			part, err := mw.CreatePart(h)
			if err == nil {
				_, err = part.Write(data)
			}
			return name, err
		})
		var reply viewReply
		if err != nil {
			reply.Error = err.Error()
		} else {
			reply.Tables = tables
		}
		h := textproto.MIMEHeader{}
		h.Set("Content-Type", "application/json")
		if part, err := mw.CreatePart(h); err == nil && json.NewEncoder(part).Encode(reply) == nil {
			mw.Close()
		}
	})
	mux.HandleFunc("POST /v1/compact", func(w http.ResponseWriter, r *http.Request) {
		var req node.CompactRequest
		if !decode(w, r, &req) {
			return
		}
		res, err := n.Compact(r.Context(), req)
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, 200, res)
	})
	mux.HandleFunc("POST /v1/prune", func(w http.ResponseWriter, r *http.Request) {
		var req pruneRequest
		if !decode(w, r, &req) {
			return
		}
		res, err := n.Prune(r.Context(), req.DryRun)
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, 200, res)
	})
	mux.HandleFunc("POST /v1/repair", func(w http.ResponseWriter, r *http.Request) {
		var req pruneRequest
		if !decode(w, r, &req) {
			return
		}
		res, err := n.Repair(r.Context(), req.DryRun)
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, 200, res)
	})
	mux.HandleFunc("POST /v1/sinks/run", func(w http.ResponseWriter, r *http.Request) {
		var req instanceRequest
		if !decode(w, r, &req) {
			return
		}
		res, err := n.RunSinks(r.Context(), req.Instance)
		reply(w, res, err)
	})
	mux.HandleFunc("POST /v1/sinks/status", func(w http.ResponseWriter, r *http.Request) {
		var req instanceRequest
		if !decode(w, r, &req) {
			return
		}
		res, err := n.SinkStatus(r.Context(), req.Instance)
		reply(w, res, err)
	})
	mux.HandleFunc("POST /v1/sinks/preview", func(w http.ResponseWriter, r *http.Request) {
		var req sink.PreviewRequest
		if !decode(w, r, &req) {
			return
		}
		res, err := n.PreviewSink(r.Context(), req)
		reply(w, res, err)
	})
	mux.HandleFunc("POST /v1/sinks/rewind", func(w http.ResponseWriter, r *http.Request) {
		var req sink.RewindRequest
		if !decode(w, r, &req) {
			return
		}
		res, err := n.Rewind(r.Context(), req)
		reply(w, res, err)
	})
	mux.HandleFunc("POST /v1/sinks/maintain", func(w http.ResponseWriter, r *http.Request) {
		var req sink.MaintainRequest
		if !decode(w, r, &req) {
			return
		}
		res, err := n.MaintainSinks(r.Context(), req)
		reply(w, res, err)
	})
	return mux
}

// viewReply is the last part of a view: the listing, its unflushed files named as the
// parts before it, or why there is none.
type viewReply struct {
	Tables []cache.TableView `json:"tables"`
	Error  string            `json:"error,omitempty"`
}

// rewindRefusal carries the refused plan, so the caller can show what is missing.
type rewindRefusal struct {
	errorBody
	Plan json.RawMessage `json:"plan"`
}

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	if err := json.NewDecoder(r.Body).Decode(v); err != nil {
		writeJSON(w, 400, errorBody{Error: "bad_request", Message: err.Error()})
		return false
	}
	return true
}

// reply writes a sink operation's result, or its error with a kind the client maps back.
func reply(w http.ResponseWriter, v any, err error) {
	switch {
	case errors.Is(err, sink.ErrUnknownSink):
		writeJSON(w, 404, errorBody{Error: "unknown_sink", Message: err.Error()})
	case errors.Is(err, sink.ErrBadRewind):
		writeJSON(w, 422, errorBody{Error: "bad_rewind", Message: err.Error()})
	case errors.Is(err, sink.ErrNotIceberg):
		writeJSON(w, 422, errorBody{Error: "not_iceberg", Message: err.Error()})
	case errors.Is(err, sink.ErrRewindGap):
		plan, _ := json.Marshal(v)
		writeJSON(w, 409, rewindRefusal{errorBody: errorBody{Error: "rewind_gap", Message: err.Error()}, Plan: plan})
	case err != nil:
		writeErr(w, err)
	default:
		writeJSON(w, 200, v)
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, err error) {
	writeJSON(w, 500, errorBody{Error: "internal", Message: err.Error()})
}

// remoteError is an error the daemon reported: its message as the daemon wrote it, and
// the kind it was, so callers can tell usage errors from failures.
type remoteError struct {
	kind error
	msg  string
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.kind }

// Client talks to a running daemon.
type Client struct {
	hc       *http.Client
	cacheErr string // as the daemon reported it when dialled
}

// ErrNoDaemon means nothing answers on the socket.
var ErrNoDaemon = errors.New("no daemon is running")

// ErrUnsupported means the daemon answering is older than the client and lacks the
// operation.
var ErrUnsupported = errors.New("the running daemon does not offer this operation")

// Dial connects to the daemon on socket, or returns ErrNoDaemon.
func Dial(ctx context.Context, socket string) (*Client, error) {
	if _, err := os.Stat(socket); err != nil {
		return nil, ErrNoDaemon
	}
	c := &Client{hc: &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
	}}}
	var ping struct {
		CacheError string `json:"cache_error"`
	}
	if err := c.do(ctx, "GET", "/v1/ping", nil, "", &ping); err != nil {
		return nil, ErrNoDaemon
	}
	c.cacheErr = ping.CacheError
	return c, nil
}

// CacheError is why the daemon's cache stopped taking rows (its log failed), or "".
func (c *Client) CacheError() string { return c.cacheErr }

func (c *Client) do(ctx context.Context, method, path string, body []byte, ctype string, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, "http://hyp"+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("daemon: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("daemon: %w", err)
	}
	if resp.StatusCode != 200 {
		var eb errorBody
		_ = json.Unmarshal(data, &eb)
		if resp.StatusCode == 400 || resp.StatusCode == 413 {
			return &cache.InputError{Kind: eb.Error, Line: eb.Line, Msg: eb.Message}
		}
		switch eb.Error {
		case "unknown_sink":
			return &remoteError{sink.ErrUnknownSink, eb.Message}
		case "bad_rewind":
			return &remoteError{sink.ErrBadRewind, eb.Message}
		case "not_iceberg":
			return &remoteError{sink.ErrNotIceberg, eb.Message}
		case "rewind_gap":
			var rr rewindRefusal
			if json.Unmarshal(data, &rr) == nil && len(rr.Plan) > 0 && out != nil {
				_ = json.Unmarshal(rr.Plan, out)
			}
			return &remoteError{sink.ErrRewindGap, eb.Message}
		}
		if resp.StatusCode == http.StatusNotFound && eb.Error == "" {
			return &remoteError{errNotFound, "daemon: no such operation: " + path}
		}
		return fmt.Errorf("daemon: %s: %s", eb.Error, eb.Message)
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}

func (c *Client) Flush(ctx context.Context) error {
	return c.do(ctx, "POST", "/v1/flush", []byte("{}"), "application/json", nil)
}

func (c *Client) Listing(ctx context.Context, dir string) ([]cache.TableView, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", "http://hyp/v1/view", nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("daemon: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return nil, ErrUnsupported // a daemon older than the view
	}
	_, params, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if resp.StatusCode != 200 || err != nil || params["boundary"] == "" {
		return nil, fmt.Errorf("daemon: view: %s, %q", resp.Status, resp.Header.Get("Content-Type"))
	}
	mr := multipart.NewReader(resp.Body, params["boundary"])
	paths := map[string]string{}
	for {
		part, err := mr.NextPart()
		if err != nil {
			return nil, fmt.Errorf("daemon: view ended before its listing: %w", err)
		}
		if name := part.FileName(); name != "" {
			if paths[name], err = writeUnflushed(dir, name, part); err != nil {
				return nil, err
			}
			continue
		}
		var reply viewReply
		if err := json.NewDecoder(part).Decode(&reply); err != nil {
			return nil, fmt.Errorf("daemon: view: %w", err)
		}
		if reply.Error != "" {
			return nil, fmt.Errorf("daemon: %s", reply.Error)
		}
		for _, t := range reply.Tables {
			for i, u := range t.Unflushed {
				if t.Unflushed[i].Path = paths[u.Path]; t.Unflushed[i].Path == "" {
					return nil, fmt.Errorf("daemon: view: listed file %q was not sent", u.Path)
				}
			}
		}
		return reply.Tables, nil
	}
}

func (c *Client) Compact(ctx context.Context, req node.CompactRequest) ([]cache.CompactResult, error) {
	b, _ := json.Marshal(req)
	var out []cache.CompactResult
	return out, c.do(ctx, "POST", "/v1/compact", b, "application/json", &out)
}

func (c *Client) Prune(ctx context.Context, dryRun bool) ([]cache.PruneResult, error) {
	b, _ := json.Marshal(pruneRequest{DryRun: dryRun})
	var out []cache.PruneResult
	return out, c.do(ctx, "POST", "/v1/prune", b, "application/json", &out)
}

func (c *Client) Repair(ctx context.Context, dryRun bool) ([]cache.Repaired, error) {
	b, _ := json.Marshal(pruneRequest{DryRun: dryRun})
	var out []cache.Repaired
	return out, c.do(ctx, "POST", "/v1/repair", b, "application/json", &out)
}

func (c *Client) Ingest(ctx context.Context, dataset, source string, body []byte) (cache.Result, error) {
	path := "/v1/ingest/" + url.PathEscape(dataset)
	if source != "" {
		path += "?source=" + url.QueryEscape(source)
	}
	var out struct {
		Accepted int    `json:"accepted"`
		FirstSeq string `json:"first_seq"`
		LastSeq  string `json:"last_seq"`
	}
	if err := c.do(ctx, "POST", path, body, "application/x-ndjson", &out); err != nil {
		return cache.Result{}, err
	}
	first, _ := strconv.ParseInt(out.FirstSeq, 10, 64)
	last, _ := strconv.ParseInt(out.LastSeq, 10, 64)
	return cache.Result{Accepted: out.Accepted, FirstSeq: first, LastSeq: last}, nil
}

func (c *Client) RunSinks(ctx context.Context, instance string) ([]sink.RunResult, error) {
	b, _ := json.Marshal(instanceRequest{Instance: instance})
	var out []sink.RunResult
	return out, c.do(ctx, "POST", "/v1/sinks/run", b, "application/json", &out)
}

func (c *Client) SinkStatus(ctx context.Context, instance string) ([]sink.InstanceStatus, error) {
	b, _ := json.Marshal(instanceRequest{Instance: instance})
	var out []sink.InstanceStatus
	return out, c.do(ctx, "POST", "/v1/sinks/status", b, "application/json", &out)
}

// ServerStatus is a single-node `hyp server`'s status (server.LocalStatus); ErrNotServer when
// the process on the socket is a daemon.
func (c *Client) ServerStatus(ctx context.Context) (cluster.Report, error) {
	var out cluster.Report
	err := c.do(ctx, "GET", "/v1/server/status", nil, "", &out)
	if errors.Is(err, errNotFound) {
		return out, ErrNotServer
	}
	return out, err
}

var (
	// ErrNotServer means the process serving a home is a daemon, not a `hyp server`.
	ErrNotServer = errors.New("the process running on this home is a daemon, not a hyp server")
	// errNotFound is the daemon's plain 404: it serves no such path.
	errNotFound = errors.New("not found")
)

func (c *Client) PreviewSink(ctx context.Context, req sink.PreviewRequest) (sink.PreviewResult, error) {
	b, _ := json.Marshal(req)
	var out sink.PreviewResult
	return out, c.do(ctx, "POST", "/v1/sinks/preview", b, "application/json", &out)
}

func (c *Client) Rewind(ctx context.Context, req sink.RewindRequest) (sink.RewindResult, error) {
	b, _ := json.Marshal(req)
	var out sink.RewindResult
	err := c.do(ctx, "POST", "/v1/sinks/rewind", b, "application/json", &out)
	return out, err
}

func (c *Client) MaintainSinks(ctx context.Context, req sink.MaintainRequest) ([]sink.MaintainResult, error) {
	b, _ := json.Marshal(req)
	var out []sink.MaintainResult
	return out, c.do(ctx, "POST", "/v1/sinks/maintain", b, "application/json", &out)
}
