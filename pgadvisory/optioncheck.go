package pgadvisory

import (
	"fmt"
	"math/bits"
)

// family is the kind of call an option is given to.
type family uint8

const (
	famExclusive      family = 1 << iota // RunExclusive, RunExclusiveRepo and their Pgx forms
	famOnce                              // RunOnce, RunOncePgx
	famSession                           // RunSession, RunSessionPgx
	famLead                              // Lead, LeadPgx, Campaign, CampaignPgx
	famLockTx                            // LockTx: a lock in the caller's transaction
	famLimited                           // RunLimited: one slot of a limited lock, in a transaction
	famSessionLimited                    // RunSessionLimited: one slot of a limited lock, on a session

	famTx       = famExclusive | famOnce | famLimited      // the transaction-scoped calls that run their own transaction
	famSessions = famSession | famLead | famSessionLimited // the session-lock calls
	famLimits   = famLimited | famSessionLimited           // the calls on a limited lock
	famAll      = famTx | famSessions | famLockTx
)

// String names the family's entry point, as the refusals say it.
func (f family) String() string {
	switch f {
	case famExclusive:
		return "RunExclusive"
	case famOnce:
		return "RunOnce"
	case famSession:
		return "RunSession"
	case famLead:
		return "Lead"
	case famLockTx:
		return "LockTx"
	case famLimited:
		return "RunLimited"
	case famSessionLimited:
		return "RunSessionLimited"
	}
	return "this call"
}

// optionSet is a set of option kinds, one bit each.
type optionSet uint32

// The option kinds, one per With function.
const (
	optWait optionSet = 1 << iota
	optShared
	optLocks
	optTxOptions
	optPgxTxOptions
	optObserver
	optCheckInterval
	optFencing
	optHolder
	optCheckTimeout
	optSessionPooler
	optReadOnly
	optLease
	optLimit
	optCount = iota
)

// optionRule is what checkOptions knows of an option kind: its name, the
// families it applies to, and why it does not apply to the others.
type optionRule struct {
	name    string
	applies family
	why     string
}

// optionRules are indexed by the bit of the option kind.
var optionRules = [optCount]optionRule{
	{"WithWait", famAll, ""},
	{"WithShared", famExclusive | famSession | famLockTx, "two shared holders would both run fn for one window"},
	{"WithLocks", famExclusive | famOnce | famSession | famLockTx, ""},
	{"WithTxOptions", famTx, "a session lock runs no transaction of its own"},
	{"WithPgxTxOptions", famTx, "a session lock runs no transaction of its own"},
	{"WithObserver", famAll, ""},
	{"WithCheckInterval", famSessions, "only a session lock is checked while fn runs"},
	{"WithFencing", famExclusive | famOnce, "the token is issued and published in the lock transaction"},
	{"WithHolder", famOnce | famLead, "it names the holder in the run-once ledger or the leader table"},
	{"WithCheckTimeout", famSessions, "only a session lock is checked while fn runs"},
	{"WithSessionPooler", famSessions, "a transaction lock works through a pooler in session or transaction mode"},
	{"WithReadOnly", famTx, "a session lock runs no transaction of its own"},
	{"WithLease", famLead | famSession, "only Lead, Campaign and RunSession take a lease"},
	{"WithLimit", famLimits, "the lock is limited to n holders at once, which only RunLimited and RunSessionLimited count; " +
		"taken by another verb it would be one more holder that no slot counts"},
}

// limitedWhy says why an option does not apply to RunLimited or
// RunSessionLimited where the rule's own reason is about another family.
var limitedWhy = map[optionSet]string{
	optShared: "a slot is held exclusively, one holder each, so that n slots are n holders; " +
		"to let more callers in at once, raise n",
	optLocks: "a limited call holds one slot of one lock",
	optFencing: "the n holders of a limited lock run at once by design, and a lock has one published token: " +
		"each holder's token would make the others' writes stale",
	optHolder: "a limited call names no holder",
	optLease:  "a limited lock is held through its slots' advisory locks",
}

// leadWhy says why an option does not apply to Lead where the rule's own
// reason is about another family.
var leadWhy = map[optionSet]string{
	optShared:       "two shared holders would both lead",
	optLocks:        "a leadership is one lock with one term; campaign for each lock separately",
	optTxOptions:    "a leadership runs no transaction of its own",
	optPgxTxOptions: "a leadership runs no transaction of its own",
	optFencing:      "the term fn receives is already the lock's published fencing token: pass it to RunFenced or SetFencingToken",
	optReadOnly:     "a leadership runs no transaction of its own",
}

// lockTxWhy says why an option does not apply to LockTx where the rule's
// own reason is about another family.
var lockTxWhy = map[optionSet]string{
	optTxOptions:    "the transaction is the caller's, begun with its own options",
	optPgxTxOptions: "the transaction is the caller's, begun with its own options",
	optReadOnly:     "the transaction is the caller's, begun with its own options",
	optFencing:      "publishing the token needs a commit of its own before the work, which the caller's transaction cannot give",
	optHolder:       "LockTx names no holder",
}

// mark records that the option of kind k is applied, and where it comes
// from: the call, or the lock's declared options.
func (c *callState) mark(k optionSet) {
	c.given |= k
	if c.declaring {
		c.declared |= k
	}
}

// declaring brackets a Lock's declared options (see Lock.named), so that
// refusals can say where an option came from.
var (
	beginDeclared = optionFunc(func(c *callState) { c.declaring = true })
	endDeclared   = optionFunc(func(c *callState) { c.declaring = false })
)

// optionName names the option of kind k and where it came from.
func (c *callState) optionName(k optionSet) string {
	name := optionRules[bits.TrailingZeros32(uint32(k))].name
	if c.declared&k == 0 {
		return name
	}
	if c.name != "" {
		return fmt.Sprintf("%s (declared with the lock %s: Lock.With or locks.yaml)", name, c.name)
	}
	return name + " (declared with the lock: Lock.With)"
}

// checkOptions refuses options that do not apply to a call of family fam,
// and combinations that cannot work.
func (c *callState) checkOptions(fam family) error {
	for rest := c.given; rest != 0; rest &= rest - 1 {
		k := rest & -rest
		if rule := optionRules[bits.TrailingZeros32(uint32(k))]; rule.applies&fam == 0 {
			why := rule.why
			if fam == famLead && leadWhy[k] != "" {
				why = leadWhy[k]
			}
			if fam == famLockTx && lockTxWhy[k] != "" {
				why = lockTxWhy[k]
			}
			if fam&famLimits != 0 && limitedWhy[k] != "" {
				why = limitedWhy[k]
			}
			return fmt.Errorf("%s does not apply to %s: %s", c.optionName(k), fam, why)
		}
	}
	if c.given&(optTxOptions|optPgxTxOptions) == optTxOptions|optPgxTxOptions {
		return fmt.Errorf("both %s and %s: give one", c.optionName(optTxOptions), c.optionName(optPgxTxOptions))
	}
	if c.fencing && c.shared {
		return fmt.Errorf("%s with %s: shared holders hold the lock at the same time, and each one's published token "+
			"would make the others' writes stale; fence an exclusive lock", c.optionName(optFencing), c.optionName(optShared))
	}
	if c.fencing && c.readOnly {
		return fmt.Errorf("%s in a read-only transaction (%s): the fenced acquisition publishes the token, which is a write",
			c.optionName(optFencing), c.optionName(c.txOptionsKind()))
	}
	if fam == famOnce && c.readOnly {
		return fmt.Errorf("RunOnce in a read-only transaction (%s): its claim of the window is a write", c.optionName(c.txOptionsKind()))
	}
	return nil
}

// txOptionsKind is the option that made the transaction read-only.
func (c *callState) txOptionsKind() optionSet {
	if c.given&optReadOnly != 0 {
		return optReadOnly
	}
	if c.given&optPgxTxOptions != 0 {
		return optPgxTxOptions
	}
	return optTxOptions
}
