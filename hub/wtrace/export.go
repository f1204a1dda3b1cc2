package wtrace

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"time"
)

// Export writes one trace of the records of dir's files from since on:
// a header starting at since, the policy, runners and nodes in force at
// since (stamped since), the records of the jobs still open at since as
// recorded (before since: a replay sees what was running), then every
// record from since on, in order. A file that cannot be read is an error;
// a torn last line (the hub appending) is not.
func Export(dir string, since time.Time, w io.Writer) error {
	list, err := List(dir)
	if err != nil {
		return fmt.Errorf("trace: %w", err)
	}
	cut := since.UnixMilli()
	ex := &exporter{fw: files{}, open: map[uint64][]Record{}, adms: map[uint64][]Record{}, tickets: map[uint64]Record{}}
	for i, f := range list {
		if i+1 < len(list) && list[i+1].Start <= cut {
			continue // ends before since
		}
		if err := ex.file(f.Path, cut); err != nil {
			return err
		}
	}
	tw, err := NewWriter(w, Header{Start: cut, Source: "hub export"})
	if err != nil {
		return err
	}
	if !ex.headed {
		if err := ex.head(tw, cut); err != nil {
			return err
		}
	}
	for i := range ex.out {
		if err := tw.Write(&ex.out[i]); err != nil {
			return err
		}
	}
	return tw.Flush()
}

// exporter folds the records before the cut into state and keeps those
// after it.
type exporter struct {
	fw      files               // for its state: policy, runners, nodes
	tickets map[uint64]Record   // demand by ticket, before the cut
	adms    map[uint64][]Record // grant, ask, answer by admission, before the cut
	open    map[uint64][]Record // records of jobs open at the cut
	headed  bool
	out     []Record
}

func (ex *exporter) file(path string, cut int64) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("trace: %w", err)
	}
	defer f.Close()
	rd, err := NewReader(f)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	for {
		rec, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if rec.T >= cut {
			if !ex.headed {
				var tmp []Record
				ex.collectHead(&tmp, cut)
				ex.out = append(ex.out, tmp...)
				ex.headed = true
			}
			ex.out = append(ex.out, rec)
			continue
		}
		ex.fold(rec)
	}
}

// fold keeps what a record before the cut says about the state at it.
func (ex *exporter) fold(rec Record) {
	ex.fw.remember(&rec)
	switch rec.K {
	case KindDemand:
		ex.tickets[rec.Ticket] = rec
	case KindGrant:
		if d, ok := ex.tickets[rec.Ticket]; ok {
			ex.adms[rec.Adm] = append(ex.adms[rec.Adm], d)
			delete(ex.tickets, rec.Ticket)
		}
		ex.adms[rec.Adm] = append(ex.adms[rec.Adm], rec)
	case KindAsk, KindAnswer:
		if _, ok := ex.adms[rec.Adm]; ok {
			ex.adms[rec.Adm] = append(ex.adms[rec.Adm], rec)
		}
		if rec.K == KindAnswer && !rec.OK {
			delete(ex.adms, rec.Adm)
		}
	case KindSubmit:
		ex.open[rec.Job] = append(ex.adms[rec.Adm], rec)
		delete(ex.adms, rec.Adm)
	case KindStart:
		if r, ok := ex.open[rec.Job]; ok {
			ex.open[rec.Job] = append(r, rec)
		}
	case KindEnd:
		delete(ex.open, rec.Job)
	}
}

func (ex *exporter) collectHead(out *[]Record, cut int64) {
	if p := ex.fw.policy; p != nil {
		r := *p
		r.T = cut
		*out = append(*out, r)
	}
	for _, m := range []map[uint64]Record{ex.fw.runners, ex.fw.nodes} {
		for _, r := range sortedRecords(m) {
			r.T = cut
			*out = append(*out, r)
		}
	}
	for _, job := range sortedKeys(ex.open) {
		*out = append(*out, ex.open[job]...)
	}
}

func (ex *exporter) head(tw *Writer, cut int64) error {
	var tmp []Record
	ex.collectHead(&tmp, cut)
	for i := range tmp {
		if err := tw.Write(&tmp[i]); err != nil {
			return err
		}
	}
	return nil
}

func sortedKeys[V any](m map[uint64]V) []uint64 {
	keys := make([]uint64, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
