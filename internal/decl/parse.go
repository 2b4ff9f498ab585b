package decl

import (
	"bytes"
	"errors"
	"fmt"
	"go/token"
	"io"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/lockgen/lockgen/keyspace"
)

var (
	fileKeys  = []string{"version", "package", "output", "locks", "retired"}
	lockKeys  = []string{"name", "doc", "params", "id", "shared", "wait", "fencing", "limit", "renamed_from", "on_rename", "on_id_change"}
	paramKeys = []string{"name", "type"}
)

// Parse reads a declarations file. path is used in error positions and to
// default the output name. It returns every problem it finds as an
// [ErrorList], together with the File as far as it could be read (nil when
// the YAML itself does not parse); run [Check] on it to find the rest.
func Parse(path string, src []byte) (*File, error) {
	p := &parser{errs: errs{file: path}, src: src}
	f := p.file(path)
	return f, p.list.Err()
}

type parser struct {
	errs
	src   []byte
	lines [][]byte // src split into lines, made on first use
}

func (p *parser) file(path string) *File {
	root, ok := p.document()
	if !ok {
		return nil
	}
	f := &File{Path: path, locksPos: pos(root)}
	if root.Kind != yaml.MappingNode {
		p.add(pos(root), "the file must be a mapping with the keys version, package and locks")
		return nil
	}
	fields := p.mapping(root, "the file", fileKeys)

	if v, ok := fields["version"]; !ok {
		p.add(pos(root), "missing version: start the file with version: %q", Version)
	} else if s, ok := p.scalar(v, "version"); ok {
		f.Version = s
		if s != Version {
			p.add(pos(v.value), "unsupported version %q: this lockgen reads version %q", s, Version)
		}
	}

	if v, ok := fields["package"]; !ok {
		p.add(pos(root), "missing package: the Go package name of the generated file, e.g. package: locks")
	} else if s, ok := p.scalar(v, "package"); ok {
		f.Package = s
		if !token.IsIdentifier(s) || token.IsKeyword(s) || s == "_" {
			p.add(pos(v.value), "package %q is not a valid Go package name", s)
		}
	}

	f.Output = defaultOutput(path)
	if v, ok := fields["output"]; ok {
		if s, ok := p.scalar(v, "output"); ok {
			if msg := outputProblem(s); msg != "" {
				p.add(pos(v.value), "output %q %s", s, msg)
			} else {
				f.Output = cleanOutput(s)
			}
		}
	}

	if v, ok := fields["locks"]; ok {
		f.locksPos = pos(v.key)
		for _, item := range p.sequence(v, "locks") {
			if l := p.lock(item); l != nil {
				f.Locks = append(f.Locks, l)
			}
		}
	}
	if v, ok := fields["retired"]; ok {
		for _, item := range p.sequence(v, "retired") {
			if s, ok := p.scalar(field{key: v.key, value: item}, "a retired lock"); ok {
				if p.name(item, s, "retired lock") {
					f.Retired = append(f.Retired, Retired{Name: s, Pos: pos(item)})
				}
			}
		}
	}
	return f
}

// document decodes src into a node tree and returns the root node.
func (p *parser) document() (root *yaml.Node, ok bool) {
	defer func() {
		// The YAML library reports problems as errors; a panic would be a bug
		// in it, and a bad file must not crash the generator.
		if r := recover(); r != nil {
			p.add(Pos{1, 1}, "cannot parse YAML: %v", r)
			root, ok = nil, false
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(p.src))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			p.add(Pos{1, 1}, "the file is empty: want version, package and locks")
		} else {
			p.yamlError(err)
		}
		return nil, false
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case errors.Is(err, io.EOF):
	case err != nil:
		p.yamlError(err)
		return nil, false
	default:
		p.add(pos(&next), "only one YAML document is allowed (remove the ---)")
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		p.add(pos(&doc), "the file must be a mapping with the keys version, package and locks")
		return nil, false
	}
	return doc.Content[0], true
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// yamlError turns the YAML library's "yaml: line N: msg" into a positioned
// problem; the library reports no column.
func (p *parser) yamlError(err error) {
	msg := err.Error()
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		p.add(Pos{line, 1}, "invalid YAML: %s", m[2])
		return
	}
	p.add(Pos{1, 1}, "invalid YAML: %s", strings.TrimPrefix(msg, "yaml: "))
}

// field is a key and its value in a mapping.
type field struct {
	key, value *yaml.Node
}

// mapping returns the known fields of n, reporting duplicate and unknown
// keys. what names the mapping in messages ("a lock").
func (p *parser) mapping(n *yaml.Node, what string, known []string) map[string]field {
	fields := make(map[string]field, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			p.add(pos(k), "keys in %s must be plain words", what)
			continue
		}
		if k.Tag == "!!merge" || k.Value == "<<" {
			p.add(pos(k), "merge keys (<<) are not supported")
			continue
		}
		if prev, dup := fields[k.Value]; dup {
			p.add(pos(k), "duplicate key %q in %s (first at line %d)", k.Value, what, prev.key.Line)
			continue
		}
		if !slices.Contains(known, k.Value) {
			p.add(pos(k), "unknown key %q in %s (known keys: %s)", k.Value, what, strings.Join(known, ", "))
			continue
		}
		fields[k.Value] = field{key: k, value: v}
	}
	return fields
}

// scalar returns the text of a scalar value; null and empty give "".
func (p *parser) scalar(f field, what string) (string, bool) {
	v := f.value
	switch {
	case v.Kind == yaml.AliasNode:
		p.add(pos(v), "%s: YAML aliases are not supported", what)
		return "", false
	case v.Kind != yaml.ScalarNode:
		p.add(pos(v), "%s must be a single value, not a %s", what, kindName(v))
		return "", false
	case v.ShortTag() == "!!null":
		return "", true
	}
	return v.Value, true
}

// sequence returns the items of a list value; null gives none.
func (p *parser) sequence(f field, what string) []*yaml.Node {
	v := f.value
	switch {
	case v.Kind == yaml.ScalarNode && v.ShortTag() == "!!null":
		return nil
	case v.Kind == yaml.AliasNode:
		p.add(pos(v), "%s: YAML aliases are not supported", what)
		return nil
	case v.Kind != yaml.SequenceNode:
		p.add(pos(v), "%s must be a list, not a %s", what, kindName(v))
		return nil
	}
	return v.Content
}

func (p *parser) boolean(f field, what string) (value, ok bool) {
	s, ok := p.scalar(f, what)
	if !ok {
		return false, false
	}
	if f.value.ShortTag() != "!!bool" {
		p.add(pos(f.value), "%s must be true or false, not %q", what, s)
		return false, false
	}
	b, err := strconv.ParseBool(strings.ToLower(s))
	if err != nil {
		p.add(pos(f.value), "%s must be true or false, not %q", what, s)
		return false, false
	}
	return b, true
}

// name validates a lock name and points a problem at the offending byte.
func (p *parser) name(n *yaml.Node, s, what string) bool {
	err := keyspace.ValidateName(s)
	if err == nil {
		return true
	}
	var ne *keyspace.NameError
	if errors.As(err, &ne) {
		p.add(p.within(n, s, ne.Offset), "invalid %s %q: %s", what, s, ne.Reason)
	} else {
		p.add(pos(n), "invalid %s %q: %v", what, s, err)
	}
	return false
}

func (p *parser) lock(n *yaml.Node) *Lock {
	if n.Kind != yaml.MappingNode {
		p.add(pos(n), "each lock must be a mapping with at least a name, not a %s", kindName(n))
		return nil
	}
	l := &Lock{Pos: pos(n), NamePos: pos(n)}
	fields := p.mapping(n, "a lock", lockKeys)

	if v, ok := fields["name"]; !ok {
		p.add(pos(n), "lock needs a name, e.g. name: reports.daily_email")
	} else if s, ok := p.scalar(v, "name"); ok {
		l.Name, l.NamePos = s, pos(v.value)
		if p.name(v.value, s, "lock name") {
			l.nameOK = true
			l.GoName = GoName(s)
		}
	}

	if v, ok := fields["doc"]; ok {
		if s, ok := p.scalar(v, "doc"); ok {
			if off, r, bad := badDocRune(s); bad {
				p.add(pos(v.value), "doc contains the control character %U at byte %d: use plain text", r, off)
			} else {
				l.Doc = strings.TrimSpace(s)
			}
		}
	}

	if v, ok := fields["params"]; ok {
		before := len(p.list)
		l.Params = p.params(v)
		l.paramsOK = len(p.list) == before
	} else {
		l.paramsOK = true
	}

	if v, ok := fields["id"]; ok {
		if s, ok := p.scalar(v, "id"); ok {
			id, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				p.add(pos(v.value), "id must be a decimal int64 (a legacy lock ID to keep), not %q", s)
			} else {
				l.HasPin, l.Pin, l.PinPos = true, id, pos(v.value)
				if len(l.Params) > 0 {
					p.add(pos(v.key), "id: pins the ID of a plain lock, but this lock has parameters: each parameter value gets its own ID")
				}
			}
		}
	}

	if v, ok := fields["shared"]; ok {
		l.Shared, _ = p.boolean(v, "shared")
	}
	if v, ok := fields["wait"]; ok {
		if s, ok := p.scalar(v, "wait"); ok {
			d, err := time.ParseDuration(s)
			switch {
			case err != nil:
				p.add(pos(v.value), "wait must be a Go duration such as 5s or 1m30s, not %q", s)
			case d < 0:
				p.add(pos(v.value), "wait must not be negative (0s waits until the context is done)")
			default:
				l.Wait, l.WaitTimeout = true, d
			}
		}
	}
	if v, ok := fields["fencing"]; ok {
		if on, ok := p.boolean(v, "fencing"); ok && on {
			l.Fencing = true
			if l.Shared {
				p.add(pos(v.key), "fencing: true needs an exclusive lock, but this lock is shared: shared holders run at once, and each one's fencing token would make the others' writes stale; remove shared: or fencing:")
			}
		}
	}

	if v, ok := fields["limit"]; ok {
		if s, ok := p.scalar(v, "limit"); ok {
			n, err := strconv.Atoi(s)
			switch {
			case err != nil || n < 1 || n > MaxLimit:
				p.add(pos(v.value), "limit must be a whole number of holders from 1 to %d, not %q", MaxLimit, s)
			case l.Shared:
				p.add(pos(v.key), "limit: needs an exclusive lock, but this lock is shared: each slot of a limited lock has one holder, so that n slots are n holders; remove shared: or limit:")
			case l.Fencing:
				p.add(pos(v.key), "limit: does not combine with fencing: true: the holders of a limited lock run at once, and each one's fencing token would make the others' writes stale; remove fencing: or limit:")
			default:
				l.Limit = n
			}
		}
	}

	p.rename(l, fields)
	return l
}

func (p *parser) rename(l *Lock, fields map[string]field) {
	rf, hasRF := fields["renamed_from"]
	if hasRF {
		if s, ok := p.scalar(rf, "renamed_from"); ok {
			l.RenamedFromPos = pos(rf.value)
			if p.name(rf.value, s, "renamed_from name") {
				l.RenamedFrom = s
			}
		}
	}
	or, hasOR := fields["on_rename"]
	if hasOR {
		if s, ok := p.scalar(or, "on_rename"); ok {
			l.OnRenamePos = pos(or.value)
			switch OnRename(s) {
			case KeepID, NewID:
				l.OnRename = OnRename(s)
			default:
				p.add(pos(or.value), "on_rename must be keep_id (keep the old ID) or new_id (accept a new ID), not %q", s)
			}
		}
	}
	switch {
	case hasRF && !hasOR:
		p.add(pos(rf.key), "renamed_from needs on_rename: keep_id (keep the old ID, so old and new replicas exclude each other during a rolling deploy) or new_id (accept a new ID)")
	case hasOR && !hasRF:
		p.add(pos(or.key), "on_rename needs renamed_from: the lock's previous name")
	case l.OnRename == KeepID && len(l.Params) > 0:
		p.add(pos(or.value), "on_rename: keep_id needs a plain lock: this lock has parameters, so every parameter value has its own ID derived from the name and there is no single ID to keep; use on_rename: new_id and let old replicas stop before new ones start")
	case l.OnRename == KeepID && l.HasPin:
		p.add(pos(or.value), "on_rename: keep_id and id: both set the lock's ID; keep one of them")
	}
	if v, ok := fields["on_id_change"]; ok {
		if s, ok := p.scalar(v, "on_id_change"); ok {
			if OnRename(s) != NewID {
				p.add(pos(v.value), "on_id_change must be new_id (accept that the lock's ID changes), not %q", s)
			} else {
				l.OnIDChange = NewID
			}
		}
	}
}

func (p *parser) params(v field) []Param {
	var params []Param
	seen := map[string]Param{}
	seenGo := map[string]Param{}
	for _, n := range p.sequence(v, "params") {
		if n.Kind != yaml.MappingNode {
			p.add(pos(n), "each parameter must be a mapping with name and type, not a %s", kindName(n))
			continue
		}
		fields := p.mapping(n, "a parameter", paramKeys)
		prm := Param{NamePos: pos(n), TypePos: pos(n)}
		if f, ok := fields["name"]; !ok {
			p.add(pos(n), "parameter needs a name, e.g. name: tenant_id")
		} else if s, ok := p.scalar(f, "parameter name"); ok {
			prm.Name, prm.NamePos = s, pos(f.value)
			if off, reason, ok := validParamName(s); !ok {
				p.add(p.within(f.value, s, off), "invalid parameter name %q: %s", s, reason)
			} else {
				prm.GoName = ParamGoName(s)
				if why := paramGoNameProblem(prm.GoName); why != "" {
					p.add(pos(f.value), "parameter %q becomes the Go identifier %s, which %s; choose another name", s, prm.GoName, why)
				}
			}
		}
		if f, ok := fields["type"]; !ok {
			p.add(pos(n), "parameter needs a type: int64, string, uuid or bool")
		} else if s, ok := p.scalar(f, "parameter type"); ok {
			prm.TypePos = pos(f.value)
			if t, err := keyspace.ParseParamType(s); err != nil {
				p.add(pos(f.value), "unknown parameter type %q: want int64, string, uuid or bool", s)
			} else {
				prm.Type = t
			}
		}
		params = append(params, prm)
		if prm.Name != "" {
			if prev, dup := seen[prm.Name]; dup {
				p.add(prm.NamePos, "duplicate parameter %q (first at line %d)", prm.Name, prev.NamePos.Line)
				continue
			}
			seen[prm.Name] = prm
			if prm.GoName == "" {
				continue
			}
			if prev, dup := seenGo[prm.GoName]; dup {
				p.add(prm.NamePos, "parameters %q and %q both become the Go identifier %s; rename one", prev.Name, prm.Name, prm.GoName)
				continue
			}
			seenGo[prm.GoName] = prm
		}
	}
	return params
}

// within returns the position of byte off inside the scalar n whose value
// is s. It is exact for plain and quoted scalars on one line; for others it
// returns the scalar's start.
func (p *parser) within(n *yaml.Node, s string, off int) Pos {
	start := pos(n)
	if n.Style&^(yaml.SingleQuotedStyle|yaml.DoubleQuotedStyle) != 0 {
		return start
	}
	col := n.Column
	if n.Style != 0 {
		col++ // the opening quote
	}
	// Check that the bytes before off appear verbatim at col on the line, so
	// escapes or line folding never produce a wrong column.
	line := p.line(n.Line)
	i := runeColumnToByte(line, col)
	if i < 0 || off > len(s) || !bytes.HasPrefix(line[i:], []byte(s[:off])) {
		return start
	}
	return Pos{n.Line, col + utf8.RuneCountInString(s[:off])}
}

func (p *parser) line(n int) []byte {
	if p.lines == nil {
		p.lines = bytes.Split(p.src, []byte("\n"))
	}
	if n < 1 || n > len(p.lines) {
		return nil
	}
	return p.lines[n-1]
}

// runeColumnToByte returns the byte index of the 1-based character column
// col in line (YAML columns count characters), or -1.
func runeColumnToByte(line []byte, col int) int {
	i := 0
	for c := 1; c < col; c++ {
		if i >= len(line) {
			return -1
		}
		_, size := utf8.DecodeRune(line[i:])
		i += size
	}
	if i > len(line) {
		return -1
	}
	return i
}

// badDocRune finds a control character other than newline and tab.
func badDocRune(s string) (int, rune, bool) {
	for i, r := range s {
		if (r < 0x20 && r != '\n' && r != '\t') || r == 0x7f || r == utf8.RuneError {
			return i, r, true
		}
	}
	return 0, 0, false
}

func defaultOutput(declPath string) string {
	base := filepath.Base(declPath)
	return strings.TrimSuffix(base, filepath.Ext(base)) + "_gen.go"
}

func outputProblem(s string) string {
	switch {
	case s == "":
		return "is empty: name the generated Go file, e.g. locks_gen.go"
	case path.IsAbs(s) || filepath.IsAbs(s) || strings.HasPrefix(s, `\`):
		return "must be relative to the declarations file"
	case cleanOutput(s) == ".." || strings.HasPrefix(cleanOutput(s), "../"):
		return "must stay in the declarations file's directory or below it: keep locks.yaml beside the package it generates"
	case !strings.HasSuffix(s, ".go"):
		return "must end in .go"
	case strings.HasSuffix(s, "_test.go"):
		return "must not be a _test.go file"
	case strings.ContainsAny(s, "\x00\n\r"):
		return "contains a control character"
	}
	return ""
}

func cleanOutput(s string) string { return path.Clean(filepath.ToSlash(s)) }

func pos(n *yaml.Node) Pos { return Pos{n.Line, n.Column} }

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	case yaml.AliasNode:
		return "alias"
	case yaml.ScalarNode:
		return fmt.Sprintf("value %q", n.Value)
	}
	return "document"
}
