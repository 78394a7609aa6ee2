package diff

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/verbsexp/verbsexp/internal/inputfile"
)

// Report is the outcome of a comparison, as -json prints it.
type Report struct {
	Old          string   `json:"old"`
	New          string   `json:"new"`
	Breaking     int      `json:"breaking"`     // unacknowledged breaking changes
	Acknowledged int      `json:"acknowledged"` // breaking changes listed in the ack file
	Compatible   int      `json:"compatible"`
	Changes      []Change `json:"changes"`
	UnusedAcks   []string `json:"unused_acks,omitempty"`
}

// NewReport counts changes, marking the breaking ones whose ID is in acks
// as acknowledged; acks that match no breaking change are listed so that
// stale acknowledgements get noticed.
func NewReport(oldName, newName string, cs []Change, acks []string) *Report {
	r := &Report{Old: oldName, New: newName, Changes: cs}
	if r.Changes == nil {
		r.Changes = []Change{}
	}
	ack := map[string]bool{}
	for _, a := range acks {
		ack[a] = true
	}
	used := map[string]bool{}
	for i := range r.Changes {
		c := &r.Changes[i]
		switch {
		case !c.Breaking:
			r.Compatible++
		case ack[c.ID()]:
			c.Acknowledged = true
			used[c.ID()] = true
			r.Acknowledged++
		default:
			r.Breaking++
		}
	}
	for _, a := range acks {
		if !used[a] {
			r.UnusedAcks = append(r.UnusedAcks, a)
		}
	}
	return r
}

// maxAckBytes bounds an ack file: tens of lines in practice.
const maxAckBytes = 16 << 20

// ReadAcks reads an ack file: one "KIND SUBJECT" per line, as the text
// report prints them; blank lines and lines starting with # are skipped.
// It is a regular file of at most maxAckBytes (a FIFO or a device is
// refused before any read).
func ReadAcks(path string) ([]string, error) {
	b, err := inputfile.Read(path, maxAckBytes, `an ack file lists reviewed breaking changes, one "KIND SUBJECT" per line`)
	if err != nil {
		return nil, err
	}
	var acks []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, maxAckLine)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		kind, subject, ok := strings.Cut(line, " ")
		if !ok || !knownKind(Kind(kind)) {
			return nil, fmt.Errorf("%s:%d: want \"KIND SUBJECT\" (e.g. \"field-moved struct ibv_exp_task.next\"), got %q", path, n, line)
		}
		acks = append(acks, kind+" "+strings.TrimSpace(subject))
	}
	if err := sc.Err(); err != nil {
		if err == bufio.ErrTooLong {
			return nil, fmt.Errorf("%s:%d: line longer than %d bytes; an ack line is one \"KIND SUBJECT\" (e.g. \"field-moved struct ibv_exp_task.next\")", path, n+1, maxAckLine)
		}
		return nil, fmt.Errorf("%s:%d: %v", path, n+1, err)
	}
	return acks, nil
}

// maxAckLine bounds one line of an ack file (a subject is a C name path,
// well under a kilobyte).
const maxAckLine = 64 << 10

var allKinds = []Kind{PackageRenamed, ArchAdded, ArchRemoved, RecordAdded, RecordRemoved, RecordRenamed, RecordSize, RecordAlign,
	FieldAdded, FieldRemoved, FieldMoved, FieldResized, FieldRetyped, FieldRenamed, FieldBits,
	ConstantAdded, ConstantRemoved, ConstantChanged, ConstantRenamed,
	FunctionAdded, FunctionRemoved, FunctionRenamed, FunctionChanged}

func knownKind(k Kind) bool {
	for _, a := range allKinds {
		if a == k {
			return true
		}
	}
	return false
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(r)
}

// group is one line of the text report: the same change on several arches.
type group struct {
	Change
	arches []string
}

// groups merges changes that are identical but for the arch, keeping the
// order of first appearance.
func groups(cs []Change) []group {
	var gs []group
	index := map[Change]int{}
	for _, c := range cs {
		key := c
		key.Arch = ""
		if i, ok := index[key]; ok {
			gs[i].arches = append(gs[i].arches, c.Arch)
			continue
		}
		index[key] = len(gs)
		gs = append(gs, group{Change: key, arches: []string{c.Arch}})
	}
	return gs
}

// Distinct counts the unacknowledged breaking, acknowledged and
// compatible changes once however many arches each occurs on, as the text
// report lists them (the Report fields count per arch).
func (r *Report) Distinct() (breaking, acknowledged, compatible int) {
	for _, g := range groups(r.Changes) {
		switch {
		case !g.Breaking:
			compatible++
		case g.Acknowledged:
			acknowledged++
		default:
			breaking++
		}
	}
	return
}

// WriteText writes the human-readable report: a summary line, then the
// breaking, acknowledged and compatible changes, one per line, each
// followed by the arches it occurs on. verbose adds the reason.
func (r *Report) WriteText(w io.Writer, verbose bool) {
	gs := groups(r.Changes)
	all := allArches(r.Changes)
	fmt.Fprintf(w, "ABI diff %s → %s: ", r.Old, r.New)
	if len(gs) == 0 {
		fmt.Fprintln(w, "no changes")
		return
	}
	nb, na, nc := r.Distinct()
	fmt.Fprintf(w, "%d breaking, %d acknowledged, %d compatible\n", nb, na, nc)
	section := func(title string, keep func(Change) bool) {
		var lines []group
		for _, g := range gs {
			if keep(g.Change) {
				lines = append(lines, g)
			}
		}
		if len(lines) == 0 {
			return
		}
		fmt.Fprintf(w, "\n%s:\n", title)
		for _, g := range lines {
			fmt.Fprintf(w, "  %s", g.ID())
			switch {
			case g.Old != "" && g.New != "":
				fmt.Fprintf(w, ": %s → %s", g.Old, g.New)
			case g.Old != "":
				fmt.Fprintf(w, " (was %s)", g.Old)
			case g.New != "":
				fmt.Fprintf(w, " (%s)", g.New)
			}
			if a := archLabel(g.arches, all); a != "" {
				fmt.Fprintf(w, " [%s]", a)
			}
			fmt.Fprintln(w)
			if verbose {
				fmt.Fprintf(w, "      %s\n", g.Why)
			}
		}
	}
	section("Breaking", func(c Change) bool { return c.Breaking && !c.Acknowledged })
	section("Breaking, acknowledged", func(c Change) bool { return c.Acknowledged })
	section("Compatible", func(c Change) bool { return !c.Breaking })
	for _, a := range r.UnusedAcks {
		fmt.Fprintf(w, "\nnote: acknowledged %q matches no breaking change; remove it from the ack file\n", a)
	}
}

func allArches(cs []Change) []string {
	var as []string
	seen := map[string]bool{}
	for _, c := range cs {
		if c.Arch != "" && !seen[c.Arch] {
			seen[c.Arch] = true
			as = append(as, c.Arch)
		}
	}
	return as
}

// archLabel is "" for arch-independent changes, "all arches" when the
// change occurs on every arch of the diff, else the list.
func archLabel(arches, all []string) string {
	if len(arches) == 1 && arches[0] == "" {
		return ""
	}
	if len(arches) == len(all) && len(all) > 1 {
		return "all arches"
	}
	return strings.Join(arches, ",")
}
