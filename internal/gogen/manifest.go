package gogen

import "github.com/lockgen/lockgen/internal/decl"

// manifest writes the manifest (see decl.ReadManifest, which reads it back
// on the next run) after a comment telling readers what it is.
func (e *emitter) manifest(locks []*decl.Lock) {
	e.p("")
	e.p("// The lines below record what this file emits. lockgen reads them back to")
	e.p("// refuse renames, removals and ID changes that the declarations do not")
	e.p("// explain. Do not edit them.")
	e.p("//")
	e.p("%s", decl.ManifestStart)
	for _, l := range locks {
		e.p("%s", l.Emitted().ManifestLine())
	}
}
