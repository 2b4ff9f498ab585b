package decl

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Pos is a 1-based line and column in a file. The zero Pos means "unknown".
type Pos struct {
	Line, Col int
}

// Error is one problem at a position in a file.
type Error struct {
	File string // path as given on the command line
	Pos  Pos
	Msg  string
}

// Error returns "file:line:col: message", or the message alone for a
// problem that belongs to no file.
func (e *Error) Error() string {
	if e.File == "" {
		return e.Msg
	}
	line, col := max(e.Pos.Line, 1), max(e.Pos.Col, 1)
	return fmt.Sprintf("%s:%d:%d: %s", e.File, line, col, e.Msg)
}

// ErrorList is every problem found in a run, sorted by file and position
// once [ErrorList.Sort] ran. Its Error method prints one problem per line.
type ErrorList []*Error

// Error prints the problems one per line.
func (l ErrorList) Error() string {
	var b strings.Builder
	for i, e := range l {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.Error())
	}
	return b.String()
}

// Sort orders the problems by file, line, column and message.
func (l ErrorList) Sort() {
	slices.SortStableFunc(l, func(a, b *Error) int {
		return cmp.Or(
			cmp.Compare(a.File, b.File),
			cmp.Compare(a.Pos.Line, b.Pos.Line),
			cmp.Compare(a.Pos.Col, b.Pos.Col),
			cmp.Compare(a.Msg, b.Msg),
		)
	})
}

// Err returns l sorted, or nil when it is empty.
func (l ErrorList) Err() error {
	if len(l) == 0 {
		return nil
	}
	l.Sort()
	return l
}

// Join merges the problems of several errors into one sorted ErrorList.
// ErrorLists and *Errors are flattened; other non-nil errors are kept as
// file-less problems. It returns nil when all are nil.
func Join(errs ...error) error {
	var all ErrorList
	for _, err := range errs {
		if err == nil {
			continue
		}
		var list ErrorList
		var one *Error
		switch {
		case errors.As(err, &list):
			all = append(all, list...)
		case errors.As(err, &one):
			all = append(all, one)
		default:
			all = append(all, &Error{Msg: err.Error()})
		}
	}
	return all.Err()
}

// errs collects problems in one file.
type errs struct {
	file string
	list ErrorList
}

func (e *errs) add(p Pos, format string, args ...any) {
	e.list = append(e.list, &Error{File: e.file, Pos: p, Msg: fmt.Sprintf(format, args...)})
}
