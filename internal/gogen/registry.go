package gogen

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/lockgen/lockgen/internal/decl"
	"github.com/lockgen/lockgen/pgadvisory"
)

// Declared is the entry of the generated registry for l, a lock checked by
// decl.Check: what the generated Declared lists for it, and what lockgen
// register records. It is the one mapping from a declaration to
// pgadvisory.Declared; the emitter prints its result.
func Declared(l *decl.Lock) pgadvisory.Declared {
	d := pgadvisory.Declared{
		Name:        l.Name,
		Doc:         l.Doc,
		Pinned:      l.Pinned,
		Shared:      l.Shared,
		Wait:        l.Wait,
		WaitTimeout: l.WaitTimeout,
		Fencing:     l.Fencing,
		Limit:       l.Limit,
	}
	if l.Plain() {
		d.ID = l.ID
	}
	for _, p := range l.Params {
		d.Params = append(d.Params, pgadvisory.DeclaredParam{Name: p.Name, Type: p.Type})
	}
	return d
}

// registry emits the Declared list.
func (e *emitter) registry(source string, locks []*decl.Lock) {
	e.p("")
	e.docComment(wrap(fmt.Sprintf("%s lists every lock declared in %s, sorted by name, for registries and tooling.", decl.RegistryName, source)))
	if len(locks) == 0 {
		e.p("var %s = []pgadvisory.Declared{}", decl.RegistryName)
		return
	}
	e.p("var %s = []pgadvisory.Declared{", decl.RegistryName)
	var fields []field
	for _, l := range locks {
		fields = appendDeclaredFields(fields[:0], Declared(l))
		e.p("\t{")
		e.fields("\t\t", fields)
		e.p("\t},")
	}
	e.p("}")
}

// appendDeclaredFields appends the fields of d's composite literal, in the
// order of pgadvisory.Declared: those with zero values left out, except a
// plain lock's ID.
func appendDeclaredFields(fields []field, d pgadvisory.Declared) []field {
	fields = append(fields, field{"Name", strconv.Quote(d.Name)})
	if d.Doc != "" {
		fields = append(fields, field{"Doc", strconv.Quote(d.Doc)})
	}
	if len(d.Params) > 0 {
		ps := make([]string, len(d.Params))
		for i, p := range d.Params {
			ps[i] = fmt.Sprintf("{Name: %s, Type: keyspace.%s}", strconv.Quote(p.Name), typeConsts[p.Type])
		}
		fields = append(fields, field{"Params", "[]pgadvisory.DeclaredParam{" + strings.Join(ps, ", ") + "}"})
	} else {
		fields = append(fields, field{"ID", strconv.FormatInt(d.ID, 10)})
	}
	if d.Pinned {
		fields = append(fields, field{"Pinned", "true"})
	}
	if d.Shared {
		fields = append(fields, field{"Shared", "true"})
	}
	if d.Wait {
		fields = append(fields, field{"Wait", "true"})
		if d.WaitTimeout != 0 {
			fields = append(fields, field{"WaitTimeout", durationExpr(d.WaitTimeout, true)})
		}
	}
	if d.Fencing {
		fields = append(fields, field{"Fencing", "true"})
	}
	if d.Limit != 0 {
		fields = append(fields, field{"Limit", strconv.Itoa(d.Limit)})
	}
	return fields
}

// field is one key: value line of a composite literal.
type field struct{ key, value string }

// fields writes key: value lines with the values aligned, as gofmt does.
func (e *emitter) fields(indent string, fields []field) {
	width := 0
	for _, f := range fields {
		width = max(width, len(f.key))
	}
	for _, f := range fields {
		e.p("%s%s:%s%s,", indent, f.key, strings.Repeat(" ", width-len(f.key)+1), f.value)
	}
}
