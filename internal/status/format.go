package status

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Empty is what WriteTable prints when no lock is held or awaited.
const Empty = "no advisory locks held or awaited"

// WriteTable writes locks as an aligned table for people:
//
//	NAME/KEY  PARAMS  MODE  STATE  PID  APP  CLIENT  XACT AGE  BACKEND  BLOCKED BY
//
// NAME/KEY is the registered name or the raw key; STATE is granted or
// waiting; BACKEND is the holder's or waiter's pg_stat_activity state (a
// holder "idle in transaction" for long is paused or stuck); "-" marks an
// empty or unknown value. When a lock is a leadership (pgadvisory.Lead),
// a last column LEADER shows it on the leader's row: "holder, term N,
// since TIME" (UTC); a lease (pgadvisory.WithLease) has a line of its own,
// MODE "lease" and no backend, whose LEADER adds ", expires TIME". The
// waiters of a lock in lockgen's queue have a line of their own, MODE
// "queued" and no backend, whose STATE counts them: "3 queued (1 shared)".
func WriteTable(w io.Writer, locks []Lock) error {
	if len(locks) == 0 {
		_, err := fmt.Fprintln(w, Empty)
		return err
	}
	leaders := slices.ContainsFunc(locks, func(l Lock) bool { return l.Leader != nil })
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	header := "NAME/KEY\tPARAMS\tMODE\tSTATE\tPID\tAPP\tCLIENT\tXACT AGE\tBACKEND\tBLOCKED BY"
	if leaders {
		header += "\tLEADER"
	}
	fmt.Fprintln(tw, header)
	for _, l := range locks {
		age := "-"
		if !l.XactStart.IsZero() {
			age = FormatAge(l.XactAge)
		}
		state := stateText(l.Granted)
		switch {
		case l.Limited != nil:
			state = limitedText(l.Limited)
		case l.Queue != nil:
			state = queueText(l.Queue)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s",
			cell(l.Label()), cell(paramsText(l.Params)), cell(l.Mode), state,
			cell(pidText(l.PID)), cell(l.AppName), cell(l.ClientAddr), age, cell(l.State), cell(pidsText(l.BlockedBy)))
		if leaders {
			fmt.Fprintf(tw, "\t%s", cell(leaderText(l.Leader)))
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

// leaderText is a leadership's LEADER cell: "holder, term N, since TIME".
func leaderText(l *Leadership) string {
	if l == nil {
		return ""
	}
	t := fmt.Sprintf("%s, term %d, since %s", l.Holder, l.Term, l.Since.UTC().Format(time.RFC3339))
	if !l.Expires.IsZero() {
		t += ", expires " + l.Expires.UTC().Format(time.RFC3339Nano)
	}
	return t
}

// cell makes s safe for one table cell: "-" when empty, and no tabs or
// newlines (application_name is chosen by clients).
func cell(s string) string {
	if s == "" {
		return "-"
	}
	return strings.Map(func(r rune) rune {
		if r == '\t' || r == '\n' || r == '\r' {
			return ' '
		}
		return r
	}, s)
}

func stateText(granted bool) string {
	if granted {
		return "granted"
	}
	return "waiting"
}

func paramsText(ps []Param) string {
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = p.Name + "=" + p.Value
	}
	return strings.Join(parts, ", ")
}

func pidText(pid int) string {
	if pid == 0 {
		return ""
	}
	return strconv.Itoa(pid)
}

func pidsText(pids []int) string {
	parts := make([]string, len(pids))
	for i, p := range pids {
		parts[i] = strconv.Itoa(p)
	}
	return strings.Join(parts, ",")
}

// FormatAge prints d at a precision people read: milliseconds below a
// second, tenths of a second below a minute, seconds above.
func FormatAge(d time.Duration) string {
	switch {
	case d < 0:
		d = 0
	case d < time.Second:
		d = d.Round(time.Millisecond)
	case d < time.Minute:
		d = d.Round(100 * time.Millisecond)
	default:
		d = d.Round(time.Second)
	}
	return d.String()
}

// JSONLock is the stable JSON form of a [Lock], as lockgen status -json
// prints it. lock_id is a decimal string because int64 IDs do not fit a
// JSON number's exact range in most tools; a lock taken with two int4 keys
// has int4_keys instead; fields that are unknown are null.
type JSONLock struct {
	LockID          *string           `json:"lock_id"`   // null for a lock taken with two int4 keys
	Int4Keys        []int32           `json:"int4_keys"` // the two int4 keys; null for a bigint key
	Name            *string           `json:"name"`      // null: not registered
	Params          map[string]string `json:"params"`    // null for plain and unregistered locks
	Mode            string            `json:"mode"`      // "exclusive" or "shared"
	State           string            `json:"state"`     // "granted" or "waiting"
	Granted         bool              `json:"granted"`
	PID             *int              `json:"pid"`
	ApplicationName *string           `json:"application_name"`
	ClientAddr      *string           `json:"client_addr"`
	XactStart       *time.Time        `json:"xact_start"`
	XactAgeSeconds  *float64          `json:"xact_age_seconds"`
	BackendState    *string           `json:"backend_state"`
	WaitEvent       *string           `json:"wait_event"`
	BlockedBy       []int             `json:"blocked_by"` // never null
	Leader          *JSONLeader       `json:"leader"`     // null unless this row's backend leads the lock
	Limit           *JSONLimit        `json:"limit"`      // null unless the line is a limited lock's (mode "limited")
	Queue           *JSONQueue        `json:"queue"`      // null unless the line is a lock's queue (mode "queued")
}

// JSONQueue is the JSON form of a [Queue].
type JSONQueue struct {
	Waiting int `json:"waiting"`
	Shared  int `json:"shared"`
}

// JSONLimit is the JSON form of a [Limited].
type JSONLimit struct {
	N       int `json:"n"`
	Held    int `json:"held"`
	Waiting int `json:"waiting"`
}

// JSONLeader is the JSON form of a [Leadership].
type JSONLeader struct {
	Holder string    `json:"holder"`
	Term   int64     `json:"term"`
	Since  time.Time `json:"since"` // UTC
	// Expires is when a lease expires unless renewed (UTC); null for a
	// session-lock leader.
	Expires *time.Time `json:"expires"`
}

// ToJSON converts l to its JSON form.
func ToJSON(l Lock) JSONLock {
	str := func(s string) *string {
		if s == "" {
			return nil
		}
		return &s
	}
	j := JSONLock{
		Name:            str(l.Name),
		Mode:            l.Mode,
		State:           stateText(l.Granted),
		Granted:         l.Granted,
		ApplicationName: str(l.AppName),
		ClientAddr:      str(l.ClientAddr),
		BackendState:    str(l.State),
		WaitEvent:       str(l.WaitEvent),
		BlockedBy:       l.BlockedBy,
	}
	if l.Int4 {
		j.Int4Keys = []int32{l.Key1, l.Key2}
	} else {
		id := strconv.FormatInt(l.LockID, 10)
		j.LockID = &id
	}
	if j.BlockedBy == nil {
		j.BlockedBy = []int{}
	}
	if l.Params != nil {
		j.Params = make(map[string]string, len(l.Params))
		for _, p := range l.Params {
			j.Params[p.Name] = p.Value
		}
	}
	if l.PID != 0 {
		pid := l.PID
		j.PID = &pid
	}
	if l.Limited != nil {
		j.Limit = &JSONLimit{N: l.Limited.N, Held: l.Limited.Held, Waiting: l.Limited.Waiting}
	}
	if l.Queue != nil {
		j.Queue = &JSONQueue{Waiting: l.Queue.Waiting, Shared: l.Queue.Shared}
	}
	if l.Leader != nil {
		j.Leader = &JSONLeader{Holder: l.Leader.Holder, Term: l.Leader.Term, Since: l.Leader.Since.UTC()}
		if !l.Leader.Expires.IsZero() {
			exp := l.Leader.Expires.UTC()
			j.Leader.Expires = &exp
		}
	}
	if !l.XactStart.IsZero() {
		start := l.XactStart.UTC()
		age := l.XactAge.Seconds()
		j.XactStart, j.XactAgeSeconds = &start, &age
	}
	return j
}

// WriteJSON writes locks as an indented JSON array of [JSONLock] ("[]" when
// there are none).
func WriteJSON(w io.Writer, locks []Lock) error {
	out := make([]JSONLock, len(locks))
	for i, l := range locks {
		out[i] = ToJSON(l)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
