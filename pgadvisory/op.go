package pgadvisory

// Op is the step of a call that failed, as [Error.Op] reports it. Compare
// it with the constants below.
type Op string

// The steps. Each constant's doc says what the step covers.
const (
	// OpOptions: an option was invalid, does not apply to the call, or
	// cannot be combined with another one (also [New]'s LockerOptions).
	OpOptions Op = "options"
	// OpBegin: checking the arguments and ctx, before anything is sent;
	// for session locks also the check for a pooler or a standby. A call
	// on a closed [Locker] ([ErrClosed]) fails here.
	OpBegin Op = "begin"
	// OpConnect: opening a connection failed (Kind [ErrConnect]); nothing
	// else was sent.
	OpConnect Op = "connect"
	// OpLock: taking the lock; for transaction locks also getting a
	// connection and BEGIN, which travel with the lock statement. Kind
	// [ErrLocked] when another session holds it.
	OpLock Op = "lock"
	// OpPublish: publishing the fencing token ([WithFencing]) in the
	// fenced acquisition: the token sequence is behind a published token
	// ([ErrStaleToken], SQLSTATE LF004), or writes with the previous token
	// were still in flight after the publish timeout ([ErrLockTimeout]).
	OpPublish Op = "publish"
	// OpElect: publishing a leader's term ([Locker.Lead]), on the lock's
	// connection once the lock is granted: the token sequence is behind
	// ([ErrStaleToken]), or writes with the previous term were still in
	// flight after the publish timeout ([ErrLockTimeout]). The lock was
	// released and fn did not run. On shared connections the statement
	// that takes a leadership's lock also elects, so a ctx that ends while
	// that statement runs is reported as OpElect too.
	OpElect Op = "elect"
	// OpCurrentLeader: [Locker.CurrentLeader]; Kind [ErrNoLeader] when
	// none leads.
	OpCurrentLeader Op = "current leader"
	// OpRunOnce: claiming the window in the run-once ledger
	// ([Locker.RunOnce]); Kind [ErrAlreadyDone] when the window already
	// has a successful run.
	OpRunOnce Op = "run-once"
	// OpFn: fn returned an error of a known kind, or one matching
	// [ErrLocked] or [ErrAlreadyDone] (a nested call's: fn ran and its
	// work was rolled back), or ctx ended while fn ran, or fn ended the
	// lock transaction itself ([ErrTxEnded]).
	OpFn Op = "fn"
	// OpCommit: COMMIT, or ctx ending before COMMIT was sent (nothing
	// committed); [ErrCommitUnknown] once COMMIT was sent without a
	// definite answer.
	OpCommit Op = "commit"
	// OpWatch: a session lock was lost while fn ran (Kind [ErrLockLost]).
	OpWatch Op = "watch"
	// OpRelease: releasing a session lock when fn returned found it lost
	// (Kind [ErrLockLost]).
	OpRelease Op = "release"
	// OpFencedWrite: [Locker.RunFenced] and [Locker.SetFencingToken];
	// Token is the token the write carried.
	OpFencedWrite Op = "fenced write"
	// OpMigrate: [Migrate], [Migrations] and [Migrator]'s methods.
	OpMigrate Op = "migrate"
	// OpRegister: [Register].
	OpRegister Op = "register"
	// OpRegisterInstance: [RegisterInstance].
	OpRegisterInstance Op = "register instance"
)
