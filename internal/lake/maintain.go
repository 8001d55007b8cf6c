package lake

import (
	"context"
	"errors"
	"fmt"
	iofs "io/fs"
	"strings"
	"time"

	"github.com/apache/iceberg-go"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
	"github.com/apache/iceberg-go/table/compaction"
	"github.com/google/uuid"
)

// Table upkeep (`hyp sink maintain`). Of what hyp writes, only three kinds of file are ever
// removed, each only once nothing can need it:
//   - files of expired snapshots that no retained snapshot references (iceberg-go's
//     ExpireSnapshots), which is how small files a compaction replaced finally go;
//   - orphans: files under the table's location that no retained snapshot or metadata
//     version references, older than MaintainOptions.OrphanOlderThan (another machine's
//     commit in flight has written files it has not committed yet), and not named by a
//     commit this machine has decided but not resolved (Protect), and not kept by another
//     record (Keep: a cluster's staged files);
//   - nothing else: a compaction only adds files and drops the small ones from the table in
//     the same snapshot.
//
// Every change is a commit pinned to the head it was computed on; when another writer
// commits meanwhile it is computed again on the new head (a compaction's written files are
// kept and re-staged, if every file it replaces is still live there). Expiry never touches
// recovery: whether a commit landed is kept in PropLastCommit, not in snapshots.

// MaintainOptions say what Maintain does to each table.
type MaintainOptions struct {
	Compact bool // rewrite small data files of a partition into larger ones
	DryRun  bool // report what would be done; change nothing
	// Snapshots older than ExpireOlderThan are expired, except the newest RetainLast.
	ExpireOlderThan time.Duration
	RetainLast      int
	OrphanOlderThan time.Duration
	// Protect are commits decided and not yet resolved: their data files may be on disk
	// and not in the table, and a recovering commit may still add them.
	Protect []Pending
	// Keep are files some record other than the table holds on to (a cluster's staged,
	// not yet committed files): never orphans, however old.
	Keep []string

	// beforeCompactCommit runs between writing a compaction's files and committing them
	// (tests commit from another writer there).
	beforeCompactCommit func()
}

// Pending is a commit whose outcome its writer has not resolved yet.
type Pending struct {
	Dataset string
	ID      string
	Base    int64
	Units   []Unit
}

// TableReport is what Maintain did (or, in a dry run, would do) to one table.
type TableReport struct {
	Table            string `json:"table"`
	SnapshotsExpired int    `json:"snapshots_expired"`
	SnapshotsBefore  int    `json:"snapshots_before"`
	SnapshotsAfter   int    `json:"snapshots_after"`
	FilesBefore      int    `json:"files_before"`
	FilesAfter       int    `json:"files_after"`
	OrphansRemoved   int    `json:"orphans_removed"`
	// BoundsFixed counts the live entries whose bounds were rewritten to hold every value
	// of their file (bounds.go).
	BoundsFixed int    `json:"bounds_fixed"`
	Error       string `json:"error,omitempty"`
}

// manifestsToRewrite is the manifest count of a snapshot from which Maintain merges them:
// every fast append adds one, and a scan opens each.
const manifestsToRewrite = 16

// upkeepAttempts bounds the retries of one upkeep commit. Unlike an export, upkeep is never
// urgent, and each retry re-plans on the new head (a compaction re-reads every manifest to
// check its inputs are live): against a writer committing faster than that, giving up and
// letting the next run try is cheaper than spinning.
const upkeepAttempts = 8

// compactMinFiles is the fewest small files of one partition worth a rewrite.
const compactMinFiles = 2

// Maintain expires snapshots, compacts data files (o.Compact), fixes manifest bounds,
// merges manifests and removes orphan files in every table of the namespace, in that
// order: expiring first
// makes a dry run's report the real one's. A table that fails is reported with its error
// and the others are still maintained; the error returned joins them.
func (l *Lake) Maintain(ctx context.Context, o MaintainOptions) ([]TableReport, error) {
	var datasets []string
	for ident, err := range l.cat.ListTables(ctx, l.ns) {
		if err != nil {
			return nil, fmt.Errorf("list tables of %s: %w", l.ns[0], err)
		}
		datasets = append(datasets, ident[len(ident)-1])
	}
	out := []TableReport{}
	var errs []error
	for _, ds := range datasets {
		r, err := l.maintainTable(ctx, ds, o)
		if err != nil {
			r.Error = err.Error()
			errs = append(errs, fmt.Errorf("%s.%s: %w", l.ns[0], ds, err))
		}
		out = append(out, r)
		if ctx.Err() != nil {
			break
		}
	}
	return out, errors.Join(errs...)
}

func (l *Lake) maintainTable(ctx context.Context, dataset string, o MaintainOptions) (TableReport, error) {
	rep := TableReport{Table: l.ns[0] + "." + dataset}
	tbl, err := l.load(ctx, dataset)
	if err != nil || tbl == nil {
		return rep, err
	}
	tasks, err := liveTasks(ctx, tbl)
	if err != nil {
		return rep, err
	}
	rep.FilesBefore, rep.FilesAfter = len(tasks), len(tasks)
	rep.SnapshotsBefore = len(tbl.Metadata().Snapshots())
	var errs []error
	if tbl, rep.SnapshotsExpired, err = l.expire(ctx, dataset, tbl, o); err != nil {
		// A commit that landed but whose file clean-up failed leaves orphans, removed below
		// or by a later run: carry on with the table it returned.
		if tbl == nil {
			return rep, err
		}
		errs = append(errs, err)
	}
	rep.SnapshotsAfter = len(tbl.Metadata().Snapshots())
	if o.DryRun {
		rep.SnapshotsAfter -= rep.SnapshotsExpired
	}
	if o.Compact {
		var after int
		if tbl, after, err = l.compact(ctx, dataset, tbl, tasks, o); err != nil {
			return rep, errors.Join(append(errs, err)...)
		}
		rep.FilesAfter = after
	}
	if tbl, rep.BoundsFixed, err = l.fixBounds(ctx, dataset, tbl, o); err != nil {
		return rep, errors.Join(append(errs, err)...)
	}
	if !o.DryRun {
		if tbl, err = l.rewriteManifests(ctx, dataset, tbl); err != nil {
			return rep, errors.Join(append(errs, err)...)
		}
		rep.SnapshotsAfter = len(tbl.Metadata().Snapshots())
	}
	if rep.OrphansRemoved, err = l.removeOrphans(ctx, dataset, tbl, o); err != nil {
		errs = append(errs, err)
	}
	return rep, errors.Join(errs...)
}

func liveTasks(ctx context.Context, tbl *table.Table) ([]table.FileScanTask, error) {
	if tbl.CurrentSnapshot() == nil {
		return nil, nil
	}
	tasks, err := tbl.Scan().PlanFiles(ctx)
	if err != nil {
		return nil, fmt.Errorf("plan %s: %w", strings.Join(tbl.Identifier(), "."), err)
	}
	return tasks, nil
}

// pinned commits what stage puts on a transaction of tbl, pinned to tbl's head; when the
// head moved it reloads the table and stages again. stage returns false for nothing to
// commit. It returns the table as committed (tbl itself when nothing was), and, beside a
// table, an error for a commit that landed but whose clean-up of old files failed.
func (l *Lake) pinned(ctx context.Context, dataset string, tbl *table.Table, what string, stage func(*table.Table, *table.Transaction) (bool, error)) (*table.Table, error) {
	for attempt := 1; ; attempt++ {
		tx := tbl.NewTransaction()
		if err := tx.AssertRefSnapshotID(table.MainBranch); err != nil {
			return nil, err
		}
		ok, err := stage(tbl, tx)
		if err != nil || !ok {
			return tbl, err
		}
		next, err := tx.Commit(ctx)
		if err == nil {
			return next, nil
		}
		if next != nil {
			return next, fmt.Errorf("%s committed, but removing the files it freed failed (a later run removes them as orphans): %w", what, err)
		}
		if !conflict(err) {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		if attempt >= upkeepAttempts {
			return nil, fmt.Errorf("%s: %w after %d attempts: %v", what, ErrGaveUp, attempt, err)
		}
		if err := backoff(ctx, attempt); err != nil {
			return nil, err
		}
		if tbl, err = l.load(ctx, dataset); err != nil {
			return nil, err
		}
		if tbl == nil {
			return nil, fmt.Errorf("%s: table %s.%s was dropped", what, l.ns[0], dataset)
		}
	}
}

// expire expires snapshots by o's rules and says how many (would) go.
func (l *Lake) expire(ctx context.Context, dataset string, tbl *table.Table, o MaintainOptions) (*table.Table, int, error) {
	n := 0
	next, err := l.pinned(ctx, dataset, tbl, "expire snapshots", func(tbl *table.Table, tx *table.Transaction) (bool, error) {
		if err := tx.ExpireSnapshots(table.WithRetainLast(max(o.RetainLast, 1)), table.WithOlderThan(o.ExpireOlderThan)); err != nil {
			return false, err
		}
		staged, err := tx.StagedTable()
		if err != nil {
			return false, err
		}
		n = len(tbl.Metadata().Snapshots()) - len(staged.Metadata().Snapshots())
		return n > 0 && !o.DryRun, nil
	})
	return next, n, err
}

// compact rewrites each partition's small live files (tasks, planned on tbl's head) into
// files of the table's target size, in one replace snapshot, and returns how many live
// data files the table then has (would have, in a dry run).
//
// A replace drops exactly the files it rewrote and adds files holding exactly their rows,
// so the table's rows do not change. A concurrent append only adds files; the commit is
// then staged again on the new head, with the same written files, if every file it
// replaces is still live there (another machine's compaction may have replaced some: then
// this one is abandoned and its written files become orphans).
func (l *Lake) compact(ctx context.Context, dataset string, tbl *table.Table, tasks []table.FileScanTask, o MaintainOptions) (*table.Table, int, error) {
	cfg := compaction.DefaultConfig()
	target := tbl.Properties().GetInt64(table.WriteTargetFileSizeBytesKey, table.WriteTargetFileSizeBytesDefault)
	cfg.TargetFileSizeBytes, cfg.MinFileSizeBytes, cfg.MaxFileSizeBytes = target, target*3/4, target*9/5
	cfg.MinInputFiles = compactMinFiles
	plan, err := cfg.PlanCompaction(tasks)
	if err != nil {
		return nil, 0, fmt.Errorf("plan compaction: %w", err)
	}
	if len(plan.Groups) == 0 {
		return tbl, len(tasks), nil
	}
	inputs := 0
	for _, g := range plan.Groups {
		inputs += len(g.Tasks)
	}
	if o.DryRun {
		return tbl, len(tasks) - inputs + plan.EstOutputFiles, nil
	}
	var results []table.CompactionGroupResult
	for _, g := range plan.Groups {
		gr, err := table.ExecuteCompactionGroup(ctx, tbl, table.CompactionTaskGroup{PartitionKey: g.PartitionKey, Tasks: g.Tasks, TotalSizeBytes: g.TotalSizeBytes})
		if err != nil {
			return nil, 0, fmt.Errorf("compact %s: %w", l.ns[0]+"."+dataset, err)
		}
		// iceberg-go's writer describes its files as FileToDataFile does: the bounds are
		// taken again from the footers (bounds.go).
		paths := make([]string, len(gr.NewDataFiles))
		for i, df := range gr.NewDataFiles {
			paths[i] = df.FilePath()
		}
		if gr.NewDataFiles, err = describeAll(ctx, tbl, paths); err != nil {
			return nil, 0, fmt.Errorf("compact %s: %w", l.ns[0]+"."+dataset, err)
		}
		results = append(results, gr)
	}
	if o.beforeCompactCommit != nil {
		o.beforeCompactCommit()
	}
	planned := headOf(tbl)
	next, err := l.pinned(ctx, dataset, tbl, "commit compaction", func(cur *table.Table, tx *table.Transaction) (bool, error) {
		if headOf(cur) != planned {
			if err := stillLive(ctx, cur, results); err != nil {
				return false, err
			}
		}
		rw := tx.NewRewrite(carriedMarkers(cur.CurrentSnapshot()))
		for _, gr := range results {
			rw.ApplyResult(gr)
		}
		return true, rw.Commit(ctx)
	})
	if err != nil && next == nil {
		return nil, 0, err
	}
	live, lerr := liveTasks(ctx, next)
	return next, len(live), errors.Join(err, lerr)
}

// PropCarried prefixes the hyp markers of the head a compaction replaced, carried forward to
// its replace snapshot (hyp.carried.gateway, hyp.carried.commit-id, hyp.carried.units), so a
// reader of the current snapshot still sees which gateway's commit it holds last. They are
// not PropGateway, PropCommitID and PropUnits themselves: recovery takes a commit id found in
// a snapshot after its base for a commit that landed there, and a compaction after a rewound
// intent was decided would carry the rewound commit's id past its new base.
const PropCarried = "hyp.carried."

// carriedMarkers are head's markers under PropCarried (iceberg-go's manifest rewrite takes no
// summary properties, so its snapshots carry none).
func carriedMarkers(head *table.Snapshot) iceberg.Properties {
	if head == nil || head.Summary == nil {
		return nil
	}
	out := iceberg.Properties{}
	for _, k := range []string{PropGateway, PropCommitID, PropUnits} {
		if v, ok := head.Summary.Properties[k]; ok {
			out[PropCarried+strings.TrimPrefix(k, "hyp.")] = v
		} else if v, ok := head.Summary.Properties[PropCarried+strings.TrimPrefix(k, "hyp.")]; ok {
			out[PropCarried+strings.TrimPrefix(k, "hyp.")] = v // a compaction of a compaction
		}
	}
	return out
}

// stillLive checks that every file the compaction replaces is live in cur.
func stillLive(ctx context.Context, cur *table.Table, results []table.CompactionGroupResult) error {
	tasks, err := liveTasks(ctx, cur)
	if err != nil {
		return err
	}
	live := make(map[string]bool, len(tasks))
	for _, t := range tasks {
		live[t.File.FilePath()] = true
	}
	for _, gr := range results {
		for _, f := range gr.OldDataFiles {
			if !live[f.FilePath()] {
				return fmt.Errorf("compaction abandoned: %s was replaced by a concurrent commit", f.FilePath())
			}
		}
	}
	return nil
}

// rewriteManifests merges the head's manifests once there are many.
func (l *Lake) rewriteManifests(ctx context.Context, dataset string, tbl *table.Table) (*table.Table, error) {
	next, err := l.pinned(ctx, dataset, tbl, "rewrite manifests", func(cur *table.Table, tx *table.Transaction) (bool, error) {
		head := cur.CurrentSnapshot()
		if head == nil {
			return false, nil
		}
		fs, err := cur.FS(ctx)
		if err != nil {
			return false, err
		}
		mans, err := head.Manifests(fs)
		if err != nil || len(mans) < manifestsToRewrite {
			return false, err
		}
		res, err := tx.RewriteManifests(ctx)
		if err != nil {
			return false, err
		}
		return !res.IsNoOp(), nil
	})
	if next == nil {
		return nil, err
	}
	return next, err
}

// removeOrphans removes (counts, in a dry run) the table's orphan files older than
// o.OrphanOlderThan that no pending commit of o.Protect names and o.Keep does not hold.
func (l *Lake) removeOrphans(ctx context.Context, dataset string, tbl *table.Table, o MaintainOptions) (int, error) {
	kept := make(map[string]bool, len(o.Keep))
	for _, f := range o.Keep {
		kept[localKey(f)] = true
	}
	return removeUnreferenced(ctx, tbl, o.OrphanOlderThan, o.DryRun, func(orphans []string) []string {
		protected := protectedIDs(o.Protect, dataset, orphans)
		var doomed []string
		for _, f := range orphans {
			if !protected(f) && !kept[localKey(f)] {
				doomed = append(doomed, f)
			}
		}
		return doomed
	})
}

// removeUnreferenced removes (counts, in a dry run) the files under tbl's location that no
// retained snapshot or metadata version references, older than olderThan, that pick
// chooses among them.
func removeUnreferenced(ctx context.Context, tbl *table.Table, olderThan time.Duration, dryRun bool, pick func(orphans []string) []string) (int, error) {
	plan, err := tbl.PlanOrphanFiles(ctx, table.WithFilesOlderThan(olderThan))
	if err != nil {
		return 0, fmt.Errorf("find orphan files: %w", err)
	}
	orphans := plan.Files()
	if len(orphans) == 0 {
		return 0, nil
	}
	// A guard against a path spelled two ways: a live data file is never an orphan.
	tasks, err := liveTasks(ctx, tbl)
	if err != nil {
		return 0, err
	}
	live := make(map[string]bool, len(tasks))
	for _, t := range tasks {
		live[localKey(t.File.FilePath())] = true
	}
	for _, f := range orphans {
		if live[localKey(f)] {
			return 0, fmt.Errorf("orphan scan named the live data file %s: removing nothing", f)
		}
	}
	doomed := pick(orphans)
	if dryRun {
		return len(doomed), nil
	}
	fs, err := tbl.FS(ctx)
	if err != nil {
		return 0, err
	}
	cutoff := plan.Cutoff()
	removed := 0
	var errs []error
	for _, f := range doomed {
		// A writer recovering a commit rewrites its files under the same names: one
		// rewritten since the scan is young again, and kept.
		if young, err := modifiedAfter(fs, f, cutoff); err != nil || young {
			if err != nil && !errors.Is(err, iofs.ErrNotExist) {
				errs = append(errs, err)
			}
			continue
		}
		if err := fs.Remove(f); err != nil && !errors.Is(err, iofs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove orphan %s: %w", f, err))
			continue
		}
		removed++
	}
	return removed, errors.Join(errs...)
}

// protectedIDs matches the files of pending commits of dataset among names. A commit's
// files are named by fileUUID per unit and run, runs written in order, so a unit's runs
// are looked for until one has no file.
func protectedIDs(pending []Pending, dataset string, names []string) func(string) bool {
	var ids []string
	for _, p := range pending {
		if p.Dataset != dataset {
			continue
		}
		c := Commit{Dataset: p.Dataset, ID: p.ID, Base: p.Base}
		for _, u := range p.Units {
			ids = append(ids, runsAmong(names, func(run int) uuid.UUID { return fileUUID(c, u, run) })...)
		}
	}
	return containsAny(ids)
}

// runsAmong returns the uuids of runs 0, 1, ... that name a file among names, stopping at
// the first run that names none: runs are written in order.
func runsAmong(names []string, runID func(run int) uuid.UUID) []string {
	all := strings.Join(names, "\n")
	var ids []string
	for run := 0; ; run++ {
		id := runID(run).String()
		if !strings.Contains(all, id) {
			return ids
		}
		ids = append(ids, id)
	}
}

// containsAny says whether a name contains one of ids.
func containsAny(ids []string) func(string) bool {
	return func(name string) bool {
		for _, id := range ids {
			if strings.Contains(name, id) {
				return true
			}
		}
		return false
	}
}

// localKey spells a file location one way: a local one as its path.
func localKey(location string) string {
	if p, ok := localFile(location); ok {
		return p
	}
	return location
}

func modifiedAfter(fs icebergio.IO, name string, cutoff time.Time) (bool, error) {
	f, err := fs.Open(name)
	if err != nil {
		return false, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return false, err
	}
	return !st.ModTime().Before(cutoff), nil
}
