package gogen

import (
	"bytes"
	"cmp"
	"fmt"
	"go/doc/comment"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lockgen/lockgen/internal/decl"
	"github.com/lockgen/lockgen/keyspace"
)

// Emit returns the Go source for f, which must have passed decl.Parse and
// decl.Check without problems. The output depends only on f's contents and
// the base name of its path: locks are sorted by name, and there are no
// timestamps or directories in it.
//
// The source is written in gofmt's layout directly (doc comments go through
// go/doc/comment as gofmt does) rather than through go/format, which would
// take most of the time for large files; the tests hold every output to
// go/format.Source.
func Emit(f *decl.File) ([]byte, error) {
	locks := slices.Clone(f.Locks)
	slices.SortFunc(locks, func(a, b *decl.Lock) int { return cmp.Compare(a.Name, b.Name) })

	for _, l := range locks {
		if err := emittable(l); err != nil {
			return nil, err
		}
	}
	e := &emitter{}
	e.header(f, locks)
	for _, l := range locks {
		if l.Plain() {
			e.plain(l)
		} else {
			e.parameterized(l)
		}
	}
	e.registry(filepath.Base(f.Path), locks)
	e.manifest(locks)
	return e.buf.Bytes(), nil
}

// emittable guards against declarations that did not pass decl.Check.
func emittable(l *decl.Lock) error {
	if l.GoName == "" {
		return fmt.Errorf("gogen: lock %q has no Go name: check the declarations with decl.Check first", l.Name)
	}
	for _, p := range l.Params {
		if p.GoName == "" || goTypes[p.Type] == "" {
			return fmt.Errorf("gogen: lock %q has an invalid parameter %q: check the declarations with decl.Check first", l.Name, p.Name)
		}
	}
	return nil
}

type emitter struct {
	buf bytes.Buffer
}

func (e *emitter) p(format string, args ...any) {
	fmt.Fprintf(&e.buf, format, args...)
	e.buf.WriteByte('\n')
}

func (e *emitter) header(f *decl.File, locks []*decl.Lock) {
	var needTime, needKeyspace bool
	for _, l := range locks {
		needTime = needTime || (l.Wait && l.WaitTimeout != 0)
		needKeyspace = needKeyspace || !l.Plain()
	}
	e.p("%s", decl.GeneratedHeader)
	e.p("")
	e.p("package %s", f.Package)
	e.p("")
	if !needTime && !needKeyspace {
		e.p("import %q", "github.com/lockgen/lockgen/pgadvisory")
		return
	}
	e.p("import (")
	if needTime {
		e.p("\t%q", "time")
		e.p("")
	}
	if needKeyspace {
		e.p("\t%q", "github.com/lockgen/lockgen/keyspace")
	}
	e.p("\t%q", "github.com/lockgen/lockgen/pgadvisory")
	e.p(")")
}

// plain emits a var of type pgadvisory.Lock.
func (e *emitter) plain(l *decl.Lock) {
	e.p("")
	e.comment(fmt.Sprintf("%s is the lock %s.", l.GoName, strconv.Quote(l.Name)), l)
	e.p("var %s = pgadvisory.Lock{Name: %s, ID: %d}%s", l.GoName, strconv.Quote(l.Name), l.ID, with(l))
}

// parameterized emits a constructor taking the lock's parameters.
func (e *emitter) parameterized(l *decl.Lock) {
	args := make([]string, len(l.Params))
	texts := make([]string, len(l.Params))
	names := make([]string, len(l.Params))
	for i, p := range l.Params {
		args[i] = p.GoName + " " + goTypes[p.Type]
		texts[i] = fmt.Sprintf("keyspace.%s(%s)", paramFuncs[p.Type], p.GoName)
		names[i] = p.GoName
	}
	e.p("")
	e.comment(fmt.Sprintf("%s returns the lock %s for the given %s.", l.GoName, strconv.Quote(l.Name), andList(names)), l)
	e.p("func %s(%s) pgadvisory.Lock {", l.GoName, strings.Join(args, ", "))
	e.p("\treturn pgadvisory.Lock{")
	e.p("\t\tName: %s,", strconv.Quote(l.Name))
	e.p("\t\tID:   keyspace.ParamID(%s, %s),", strconv.Quote(l.Name), strings.Join(texts, ", "))
	e.p("\t}%s", with(l))
	e.p("}")
}

// comment writes a doc comment: the first sentence and what the
// declaration adds (pin, kept ID, options) as one wrapped paragraph, then
// the declared doc text as written.
func (e *emitter) comment(first string, l *decl.Lock) {
	sentences := []string{first}
	switch {
	case l.HasPin:
		sentences = append(sentences, "Its ID is pinned by id: in the declarations, to match code that used it before.")
	case l.Pinned:
		sentences = append(sentences, fmt.Sprintf("It was renamed from %s and keeps that lock's ID.", strconv.Quote(l.RenamedFrom)))
	}
	switch {
	case l.Shared && l.Wait:
		sentences = append(sentences, "It is taken in shared mode and "+waitText(l.WaitTimeout)+".")
	case l.Shared:
		sentences = append(sentences, "It is taken in shared mode.")
	case l.Wait:
		sentences = append(sentences, "It "+waitText(l.WaitTimeout)+".")
	}
	if l.Fencing {
		sentences = append(sentences, "Each acquisition issues a fencing token (pgadvisory.WithFencing).")
	}
	if l.Limit != 0 {
		sentences = append(sentences, fmt.Sprintf("At most %d holders run at once (pgadvisory.WithLimit): take it with "+
			"Locker.RunLimited or Locker.RunSessionLimited, with n %d or 0 (its declared limit).", l.Limit, l.Limit))
	}
	lines := wrap(strings.Join(sentences, " "))
	if l.Doc != "" {
		lines = append(lines, "")
		lines = append(lines, strings.Split(l.Doc, "\n")...)
	}
	e.docComment(lines)
}

// docComment writes lines as a doc comment the way gofmt reformats it
// (go/printer's formatDocComment): parsed and printed by go/doc/comment.
func (e *emitter) docComment(lines []string) {
	var text strings.Builder
	for _, line := range lines {
		text.WriteString(strings.TrimRight(line, " \t"))
		text.WriteByte('\n')
	}
	var p comment.Parser
	var pr comment.Printer
	out := string(pr.Comment(p.Parse(text.String())))
	// gofmt is not idempotent on some odd comments (an indented list after
	// a code block gets indented again on each run): reformat until stable,
	// so the file is gofmt-clean.
	for range 8 {
		again := string(pr.Comment(p.Parse(out)))
		if again == out {
			break
		}
		out = again
	}
	for out != "" {
		var line string
		line, out, _ = strings.Cut(out, "\n")
		switch {
		case line == "":
			e.p("//")
		case strings.HasPrefix(line, "\t"):
			e.p("//%s", line)
		default:
			e.p("// %s", line)
		}
	}
}

// commentWidth is where generated comment text wraps.
const commentWidth = 76

// wrap breaks text into lines of at most commentWidth bytes where it can.
func wrap(text string) []string {
	var lines []string
	var line strings.Builder
	for _, w := range strings.Fields(text) {
		if line.Len() > 0 && line.Len()+1+len(w) > commentWidth {
			lines = append(lines, line.String())
			line.Reset()
		}
		if line.Len() > 0 {
			line.WriteByte(' ')
		}
		line.WriteString(w)
	}
	return append(lines, line.String())
}

func waitText(d time.Duration) string {
	if d == 0 {
		return "waits for the lock until the context is done"
	}
	return "waits up to " + shortDuration(d) + " for the lock"
}

// shortDuration is d.String() without zero minutes and seconds: 1h, 1h30m.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// with returns the .With(...) call applying the lock's declared options.
func with(l *decl.Lock) string {
	var opts []string
	if l.Shared {
		opts = append(opts, "pgadvisory.WithShared()")
	}
	if l.Wait {
		// gofmt drops the blanks around * inside a call with several
		// arguments: With(WithShared(), WithWait(5*time.Second)).
		opts = append(opts, "pgadvisory.WithWait("+durationExpr(l.WaitTimeout, !l.Shared && !l.Fencing && l.Limit == 0)+")")
	}
	if l.Fencing {
		opts = append(opts, "pgadvisory.WithFencing()")
	}
	if l.Limit != 0 {
		opts = append(opts, fmt.Sprintf("pgadvisory.WithLimit(%d)", l.Limit))
	}
	if len(opts) == 0 {
		return ""
	}
	return ".With(" + strings.Join(opts, ", ") + ")"
}

// durationExpr writes d the way a person would: 5 * time.Second,
// 90 * time.Minute, 1500 * time.Millisecond; without blanks around the *
// unless spaced.
func durationExpr(d time.Duration, spaced bool) string {
	if d == 0 {
		return "0"
	}
	units := []struct {
		d    time.Duration
		name string
	}{
		{time.Hour, "time.Hour"},
		{time.Minute, "time.Minute"},
		{time.Second, "time.Second"},
		{time.Millisecond, "time.Millisecond"},
		{time.Microsecond, "time.Microsecond"},
		{time.Nanosecond, "time.Nanosecond"},
	}
	for _, u := range units {
		if d%u.d == 0 {
			if d == u.d {
				return u.name
			}
			if !spaced {
				return fmt.Sprintf("%d*%s", d/u.d, u.name)
			}
			return fmt.Sprintf("%d * %s", d/u.d, u.name)
		}
	}
	panic("unreachable")
}

var (
	goTypes = map[keyspace.ParamType]string{
		keyspace.Int64: "int64", keyspace.String: "string", keyspace.UUID: "[16]byte", keyspace.Bool: "bool",
	}
	paramFuncs = map[keyspace.ParamType]string{
		keyspace.Int64: "Int64Param", keyspace.String: "StringParam", keyspace.UUID: "UUIDParam", keyspace.Bool: "BoolParam",
	}
	typeConsts = map[keyspace.ParamType]string{
		keyspace.Int64: "Int64", keyspace.String: "String", keyspace.UUID: "UUID", keyspace.Bool: "Bool",
	}
)

// andList joins words as "a", "a and b", "a, b and c".
func andList(words []string) string {
	switch len(words) {
	case 0:
		return ""
	case 1:
		return words[0]
	}
	return strings.Join(words[:len(words)-1], ", ") + " and " + words[len(words)-1]
}
