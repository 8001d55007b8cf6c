package cache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/hyp-project/hyp/internal/fsutil"
	"github.com/hyp-project/hyp/internal/partition"
)

// A table's metadata file names its live data files; the files themselves sit in the
// generation's data directory. When the newest metadata file (vN.metadata.json) is lost or
// garbled, the catalog loads the version before it, which does not name the files the lost
// commit added, although they are on disk and the log segment that held their rows may
// already be released. So the writer, at open and before anything can commit on top of the
// older version or remove the generation, puts every such file back (recoverFiles): rows
// are never lost to a missing pointer, and what cannot be put back is kept and recorded as
// a loss. A garbled newest metadata file is kept aside first (setAsideBadMetadata), so the
// catalog loads the newest complete version.

// keptAt is where the writer keeps the file at path of p's generation gen when it has to
// take it out of a table (layout.lostFile), and the directory that holds it.
func (ts *tableSet) keptAt(p *Partition, gen, path string) (dst, dir string, err error) {
	seg, err := partition.PathSegment(p.Name())
	if err != nil {
		return "", "", err
	}
	l := layout(ts.dir)
	return l.lostFile(p.Dataset, seg, gen, path), l.lostFiles(p.Dataset, seg), nil
}

// keep moves path into p's keep directory (keptAt) and returns where it is now.
func (ts *tableSet) keep(p *Partition, gen, path string) (string, error) {
	dst, dir, err := ts.keptAt(p, gen, path)
	if err != nil {
		return "", err
	}
	if err := fsutil.MkdirAllSync(dir); err != nil {
		return "", err
	}
	if err := os.Rename(path, dst); err != nil {
		return "", err
	}
	if err := fsutil.SyncDir(dir); err != nil {
		return "", err
	}
	return dst, fsutil.SyncDir(filepath.Dir(path))
}

// setAsideBadMetadata keeps aside, under cache/_lost, every newest metadata file of
// generation gen of p that does not parse, so that the catalog, which loads the highest
// version present, loads the newest complete one. It never removes the last version: a
// table with no complete metadata at all is set aside whole by the caller.
func (ts *tableSet) setAsideBadMetadata(p *Partition, gen string) error {
	td := p.dir.generation(gen)
	vs, err := td.metadataVersions()
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	for i, v := range vs {
		if i == len(vs)-1 {
			return nil
		}
		path := td.metadataFile(v)
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("read %s: %w", path, err)
		}
		_, perr := table.ParseMetadataBytes(b)
		if perr == nil {
			return nil
		}
		kept, err := ts.keep(p, gen, path)
		if err != nil {
			return fmt.Errorf("keep aside garbled %s: %w", path, err)
		}
		ts.notes = append(ts.notes, fmt.Sprintf("partition %s/%s: metadata file %s does not parse (%v); kept at %s, the table goes on from version %d and its files are checked",
			p.Dataset, p.Name(), path, perr, kept, vs[i+1]))
	}
	return nil
}

// recoverFiles puts back into p's current table every data file of its generation that the
// table does not name, that holds rows above the table's pruned mark, and none of whose
// seqs the table (or another file put back) already holds: what a commit whose metadata
// file is gone had added. A failed or cut-short write leaves files too, but their rows
// are either in the table again (the replay committed them in another file, overlapping
// this one) or still in the log and above the table's max seq, which moves up to cover
// the file put back, so the replay skips them: no row is held twice. A file that cannot
// be read is put back for nobody: when a manifest of the lost commit names it, its seq
// range is recorded as a loss and the file kept under cache/_lost; when none does, it is a
// write cut short whose rows were never committed, and it stays where it is.
func (ts *tableSet) recoverFiles(ctx context.Context, p *Partition) error {
	g := p.gen
	paths := tableDir(g.dir).dataFiles()
	if len(paths) == 0 {
		return nil
	}
	named := make(map[string]bool, len(g.files))
	for _, f := range g.files {
		named[filepath.Clean(f.Path)] = true
	}
	var back, unreadable []FileInfo
	var reasons []error
	for _, path := range paths {
		if named[filepath.Clean(path)] {
			continue
		}
		fi, err := footerInfo(path)
		if err != nil {
			unreadable = append(unreadable, FileInfo{Path: path})
			reasons = append(reasons, err)
			continue
		}
		back = append(back, fi)
	}
	if len(back) == 0 && len(unreadable) == 0 {
		return nil
	}
	holds := slices.Clone(g.files)
	sortFiles(back)
	kept := back[:0]
	for _, f := range back {
		if f.Rows > 0 && f.MinSeq > g.prunedThrough && !overlaps(holds, f) {
			kept = append(kept, f)
			holds = append(holds, f)
		}
	}
	back = kept
	if len(unreadable) > 0 {
		if err := ts.recordUnreadable(ctx, p, holds, unreadable, reasons); err != nil {
			return err
		}
	}
	if len(back) == 0 {
		return nil
	}
	m := g.marks
	for _, f := range back {
		m.maxSeq = max(m.maxSeq, f.MaxSeq)
	}
	if g.moved != "" {
		// Its metadata is not its own yet: relocation, next, writes it with these files.
		g.files = append(g.files, back...)
		sortFiles(g.files)
		g.marks = m
	} else {
		uris := make([]string, len(back))
		for i, f := range back {
			uris[i] = fileURI(f.Path)
		}
		tx := g.tbl.NewTransaction()
		if err := tx.SetProperties(m.props()); err != nil {
			return fmt.Errorf("table %v: %w", g.ident, err)
		}
		if _, err := g.addFiles(ctx, tx, uris); err != nil {
			return fmt.Errorf("table %v: put back data files its metadata lost: %w", g.ident, err)
		}
		if err := g.commit(ctx, tx); err != nil {
			return fmt.Errorf("table %v: commit data files its metadata lost: %w", g.ident, err)
		}
		if err := g.reload(ctx); err != nil {
			return err
		}
	}
	for _, f := range back {
		ts.notes = append(ts.notes, fmt.Sprintf("partition %s/%s: data file %s (seqs %d..%d, %d rows) was on disk but not in the table (a lost metadata file?); put back",
			p.Dataset, p.Name(), f.Path, f.MinSeq, f.MaxSeq, f.Rows))
	}
	return nil
}

// overlaps reports whether any of files holds a seq in f's range.
func overlaps(files []FileInfo, f FileInfo) bool {
	return slices.ContainsFunc(files, func(h FileInfo) bool { return h.MinSeq <= f.MaxSeq && f.MinSeq <= h.MaxSeq })
}

// recordUnreadable handles the unreadable files recoverFiles found (see there); holds are
// the files the table holds once the readable ones are back.
func (ts *tableSet) recordUnreadable(ctx context.Context, p *Partition, holds, files []FileInfo, reasons []error) error {
	g := p.gen
	var bounds map[string]FileInfo
	if g.moved == "" {
		bounds = g.unnamedEntries(ctx)
	}
	for i, f := range files {
		b, ok := bounds[filepath.Clean(f.Path)]
		if !ok || b.Rows == 0 || b.MinSeq <= g.prunedThrough || overlaps(holds, b) {
			ts.notes = append(ts.notes, fmt.Sprintf("partition %s/%s: data file %s cannot be read (%v) and no commit of the table holds rows of it: a write cut short, whose rows the log still holds or already replayed; left in place",
				p.Dataset, p.Name(), f.Path, reasons[i]))
			continue
		}
		kept, _, err := ts.keptAt(p, g.name, f.Path)
		if err != nil {
			return err
		}
		x := Lost{Dataset: p.Dataset, Partition: p.Name(), FromSeq: b.MinSeq, ToSeq: b.MaxSeq, Rows: b.Rows,
			Reason:     fmt.Sprintf("unreadable data file %s of a commit whose metadata file is missing: %v", f.Path, reasons[i]),
			DetectedAt: time.Now().UTC(), KeptAt: kept}
		// The loss is durable before the file moves; a crash between the two finds the file
		// again and records nothing twice (losses.add).
		if err := ts.lost(x); err != nil {
			return err
		}
		if _, err := ts.keep(p, g.name, f.Path); err != nil {
			return fmt.Errorf("keep aside unreadable %s: %w", f.Path, err)
		}
	}
	return nil
}

// unnamedEntries reads the manifest lists in the generation's metadata directory that its
// current snapshot does not name (those of a commit whose metadata file was lost) and
// returns, by local path, what their manifests say about each data file. It is best
// effort: what cannot be read says nothing.
func (g *generation) unnamedEntries(ctx context.Context) map[string]FileInfo {
	fio, err := g.tbl.FS(ctx)
	if err != nil {
		return nil
	}
	current := ""
	if snap := g.tbl.CurrentSnapshot(); snap != nil {
		current = filepath.Clean(localPath(snap.ManifestList))
	}
	lists := tableDir(g.dir).manifestLists()
	out := map[string]FileInfo{}
	for _, l := range lists {
		if filepath.Clean(l) == current {
			continue
		}
		b, err := os.ReadFile(l)
		if err != nil {
			continue
		}
		mfs, err := iceberg.ReadManifestList(bytes.NewReader(b))
		if err != nil {
			continue
		}
		for _, mf := range mfs {
			if mf.ManifestContent() != iceberg.ManifestContentData {
				continue
			}
			entries, err := mf.FetchEntries(fio, true)
			if err != nil {
				continue
			}
			for _, e := range entries {
				fi := fileInfo(e.DataFile())
				out[filepath.Clean(fi.Path)] = fi
			}
		}
	}
	return out
}

// fixVersionHint makes the catalog's version hint name the version the table was loaded
// from, when a lost or garbled newer version left it naming one that is not there.
func (ts *tableSet) fixVersionHint(p *Partition) error {
	g := p.gen
	v, ok := metadataVersionOf(filepath.Base(localPath(g.tbl.MetadataLocation())))
	if !ok || g.moved != "" {
		return nil
	}
	path := tableDir(g.dir).versionHint()
	b, err := os.ReadFile(path)
	if err == nil && strings.TrimSpace(string(b)) == v {
		return nil
	}
	if err := fsutil.WriteFileAtomic(path, []byte(v), 0o600); err != nil {
		return fmt.Errorf("table %v: rewrite %s: %w", g.ident, filepath.Base(path), err)
	}
	ts.notes = append(ts.notes, fmt.Sprintf("partition %s/%s: %s named version %q; it now names %s, the newest complete one",
		p.Dataset, p.Name(), path, strings.TrimSpace(string(b)), v))
	return nil
}
