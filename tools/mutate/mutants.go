package main

// The packages the mutants' tests live in.
var (
	pgadvisory = []string{"./pgadvisory"}
	migrations = []string{"./migrations"}
)

// Texts that tell a function's latest definition from the older one that
// the same migration's Down part restores.
const (
	// fence_require_current in 00005's Up part, up to its FOR SHARE.
	requireCurrentUp = "SET search_path = pg_catalog, pg_temp\nAS $$\nDECLARE\n    v_cur bigint;\n    v_lock text;\nBEGIN\n" +
		"    SELECT f.token INTO v_cur FROM pgadvisory.fence AS f WHERE f.lock_id = p_lock "
	// fence_truncate_guard's hint for a TRUNCATE without a token in 00006's Up part.
	truncateHintUp = "                  HINT = 'A write''s token is the transaction-local setting pgadvisory.fencing_token (set_config(''pgadvisory.fencing_token'', token, true)).';"
	// fence_truncate_guard in 00006's Up part, from its parameterized-lock
	// refusal to the message that differs from 00002's.
	truncateParamUp = " THEN\n        -- Parameterized: one token cannot speak for every lock's rows.\n" +
		"        RAISE EXCEPTION 'pgadvisory: TRUNCATE of %.% is not allowed: the table is fenced by the parameterized lock %; DELETE rows instead',\n" +
		"            TG_TABLE_SCHEMA, TG_TABLE_NAME, TG_ARGV[0]\n            USING ERRCODE = 'LF003';\n    END IF;\n    v_lock := TG_ARGV[0]::bigint;\n" +
		"    IF v_guc IS NULL THEN\n        RAISE EXCEPTION 'pgadvisory: TRUNCATE on %.% carries no fencing token (lock %): take"
)

// Mutants is the list: each breaks one promise of README's (fencing,
// elections, run-once, loss of a session lock, the outcome of a COMMIT)
// in the SQL of the migrations or in the Go safety core. A mutant of a
// migration targets the latest definition of its function or view
// (checkMutant refuses one that a later migration replaces).
var Mutants = []Mutant{
	// ---- fencing: the publish (fence_acquire, fence_handover) ----
	{
		Name: "fence-publish-equal-token", Area: "fencing",
		File:    "migrations/00005_fencing_acquire.sql",
		Search:  "            WHERE f.token < excluded.token;",
		Replace: "            WHERE f.token <= excluded.token;",
		Promise: "a token is published only over a smaller one: a sequence set back to the published token raises LF004",
		Pkgs:    pgadvisory, Run: "^TestFencingPublishRefuses",
	},
	{
		Name: "fence-publish-no-lf004", Area: "fencing",
		File:    "migrations/00005_fencing_acquire.sql",
		Search:  "            IF NOT FOUND THEN\n                -- This session holds the lock",
		Replace: "            IF false THEN\n                -- This session holds the lock",
		Promise: "a sequence behind a published token fails the acquisition with LF004 instead of granting a stale token",
		Pkgs:    pgadvisory, Run: "^TestFencingPublishRefusesToGoBack$",
	},
	{
		Name: "fence-publish-async-commit", Area: "fencing",
		File:    "migrations/00005_fencing_acquire.sql",
		Search:  "        IF pg_catalog.current_setting('synchronous_commit') = 'off' THEN\n            v_set := pg_catalog.set_config('synchronous_commit', 'on', true);",
		Replace: "        IF false THEN\n            v_set := pg_catalog.set_config('synchronous_commit', 'on', true);",
		Promise: "the publish is durable before fn runs, whatever synchronous_commit says",
		Pkgs:    pgadvisory, Run: "^TestFencingPublishSurvivesCrash$",
	},
	{
		Name: "fence-publish-no-timeout", Area: "fencing",
		File:    "migrations/00005_fencing_acquire.sql",
		Search:  "        v_set := pg_catalog.set_config('lock_timeout', p_publish_timeout, true);\n        v_token",
		Replace: "        v_token",
		Promise: "the publish waits at most the publish timeout for writers of the previous token (55P03)",
		Pkgs:    migrations, Run: "^TestFencePublishTimesOutForInFlightWrites$",
	},
	{
		Name: "fence-try-keeps-partial-set", Area: "fencing",
		File:    "migrations/00005_fencing_acquire.sql",
		Search:  "                PERFORM pg_catalog.pg_advisory_unlock(l.id)\n                FROM pg_catalog.unnest(v_ids) AS l(id) WHERE l.id < v_id;",
		Replace: "                PERFORM l.id\n                FROM pg_catalog.unnest(v_ids) AS l(id) WHERE l.id < v_id;",
		Promise: "a fenced set not granted whole leaves none of its locks held",
		Pkgs:    pgadvisory, Run: "^(TestFencingFailuresLeakNothing|TestPgBouncerFencing)$",
	},
	{
		Name: "fence-error-keeps-locks", Area: "fencing",
		File:    "migrations/00005_fencing_acquire.sql",
		Search:  "        PERFORM pg_catalog.pg_advisory_unlock(l.id)\n        FROM pg_catalog.pg_locks AS k",
		Replace: "        PERFORM l.id\n        FROM pg_catalog.pg_locks AS k",
		Promise: "a fenced acquisition that fails after its first lock releases what it took",
		Pkgs:    pgadvisory, Run: "^(TestFencingFailuresLeakNothing|TestPgBouncerFencing)$",
	},
	{
		Name: "fence-handover-gap", Area: "fencing",
		File:    "migrations/00005_fencing_acquire.sql",
		Search:  "IF NOT pg_catalog.pg_try_advisory_xact_lock(v_id) OR NOT pg_catalog.pg_advisory_unlock(v_id) THEN",
		Replace: "IF NOT pg_catalog.pg_advisory_unlock(v_id) THEN",
		Promise: "the lock is never free between the publish and fn, and is held until fn's transaction ends",
		Pkgs:    pgadvisory, Run: "^TestFencingNoGap",
	},
	{
		Name: "fence-handover-wrong-token", Area: "fencing",
		File:    "migrations/00005_fencing_acquire.sql",
		Search:  "v_set := pg_catalog.set_config('pgadvisory.fencing_token', v_token::text, true);",
		Replace: "v_set := pg_catalog.set_config('pgadvisory.fencing_token', (v_token - 1)::text, true);",
		Promise: "fn's writes carry the token that was published",
		Pkgs:    pgadvisory, Run: "^TestFencingTokens$",
	},
	{
		Name: "fence-standby-grants", Area: "fencing",
		File:    "migrations/00005_fencing_acquire.sql",
		Search:  "    standby := pg_catalog.pg_is_in_recovery();",
		Replace: "    standby := false;",
		Promise: "a fenced acquisition on a hot standby is refused (its locks exclude nobody on the primary)",
		Pkgs:    pgadvisory, Run: "^TestStandbyRefusesEveryFrontDoor$",
	},
	{
		Name: "fence-require-current-null-passes", Area: "fencing",
		File:    "migrations/00005_fencing_acquire.sql",
		Search:  requireCurrentUp + "FOR SHARE;\n    IF v_cur IS DISTINCT FROM p_token THEN",
		Replace: requireCurrentUp + "FOR SHARE;\n    IF v_cur <> p_token THEN",
		Promise: "a parameterized lock whose token was never published refuses writes (LF001)",
		Pkgs:    migrations, Run: "^TestFenceUnpublishedLock$",
	},
	{
		Name: "fence-require-current-no-share", Area: "fencing",
		File:    "migrations/00005_fencing_acquire.sql",
		Search:  requireCurrentUp + "FOR SHARE;",
		Replace: requireCurrentUp + ";",
		Promise: "a write of a parameterized lock keeps its fence row FOR SHARE: the next holder's publish waits for it",
		Pkgs:    migrations, Run: "^TestFence(PublishTimesOutForInFlightWrites|PublishOrderedAfterWriter|Parameterized)",
	},

	// ---- fencing: the checks of fenced tables (00006) ----
	{
		Name: "stamp-check-first-row-only", Area: "fencing",
		File:    "migrations/00006_fencing_statement_check.sql",
		Search:  "FROM fence_new AS n ORDER BY 3 DESC LIMIT 1;",
		Replace: "FROM fence_new AS n LIMIT 1;",
		Promise: "every row a statement wrote must carry the write's token as its stamp, not only the first",
		Pkgs:    migrations, Run: "^TestFenceReorderingTrigger",
	},
	{
		Name: "stamp-check-ignored", Area: "fencing",
		File:    "migrations/00006_fencing_statement_check.sql",
		Search:  "    IF v_bad THEN",
		Replace: "    IF false THEN",
		Promise: "a trigger that changes a row's stamp after lockgen's cannot make a write pass (LF001)",
		Pkgs:    migrations, Run: "^TestFenceReorderingTriggerChangesStamp$",
	},
	{
		Name: "statement-check-strict-off", Area: "fencing",
		File:    "migrations/00006_fencing_statement_check.sql",
		Search:  "    IF v_tok IS NULL AND v_policy = 'strict' THEN",
		Replace: "    IF false THEN",
		Promise: "under the strict policy a write without a token is refused (LF002)",
		Pkgs:    migrations, Run: "^TestFenceMissingToken$",
	},
	{
		Name: "statement-check-stale-passes", Area: "fencing",
		File:    "migrations/00006_fencing_statement_check.sql",
		Search:  "        IF v_cur IS DISTINCT FROM v_tok THEN",
		Replace: "        IF v_cur < v_tok THEN",
		Promise: "a write with a token older than the published one is refused (LF001)",
		Pkgs:    migrations, Run: "^TestFenceRejectsStaleToken$",
	},
	{
		Name: "statement-check-no-share", Area: "fencing",
		File:    "migrations/00006_fencing_statement_check.sql",
		Search:  "        SELECT f.token INTO v_cur FROM pgadvisory.fence AS f WHERE f.lock_id = v_id FOR SHARE;",
		Replace: "        SELECT f.token INTO v_cur FROM pgadvisory.fence AS f WHERE f.lock_id = v_id;",
		Promise: "a write keeps its lock's fence row FOR SHARE, so the next holder's publish waits for it",
		Pkgs:    migrations, Run: "^TestFencePublish(TimesOutForInFlightWrites|OrderedAfterWriter)$",
	},
	{
		Name: "statement-check-delete-unchecked", Area: "fencing",
		File:    "migrations/00006_fencing_statement_check.sql",
		Search:  "        SELECT EXISTS (SELECT FROM fence_old) INTO v_rows;",
		Replace: "        v_rows := false;",
		Promise: "a DELETE is fenced as an INSERT or UPDATE is",
		Pkgs:    migrations, Run: "^TestFence(RejectsStaleToken|MissingToken|ParameterizedLocksAreIndependent)$",
	},
	{
		Name: "statement-check-old-rows-unchecked", Area: "fencing",
		File:    "migrations/00006_fencing_statement_check.sql",
		Search:  "        ELSE pg_catalog.format('SELECT true, ARRAY[%1$s] FROM fence_new UNION SELECT false, ARRAY[%1$s] FROM fence_old', v_cols)",
		Replace: "        ELSE pg_catalog.format('SELECT true, ARRAY[%1$s] FROM fence_new', v_cols)",
		Promise: "an UPDATE that moves a row to another parameterized lock needs the old lock's token too",
		Pkgs:    migrations, Run: "^TestFenceParameterized",
	},
	{
		Name: "row-stamp-stale-update", Area: "fencing",
		File:    "migrations/00006_fencing_statement_check.sql",
		Search:  "    ELSIF TG_OP = 'UPDATE' AND OLD.fencing_token IS NOT NULL AND v_tok < OLD.fencing_token THEN",
		Replace: "    ELSIF false THEN",
		Promise: "an UPDATE with a token older than the row's stamp is refused (LF001)",
		Pkgs:    migrations, Run: "^TestFence(RejectsStaleToken|AcceptsCurrentTokenAndStamps|LegacyToken)",
	},
	{
		Name: "truncate-guard-unchecked", Area: "fencing",
		File:    "migrations/00006_fencing_statement_check.sql",
		Search:  truncateHintUp + "\n    END IF;\n    PERFORM pgadvisory.fence_require_current(v_lock, v_guc::bigint, NULL, NULL);",
		Replace: truncateHintUp + "\n    END IF;",
		Promise: "a TRUNCATE with a stale token is refused",
		Pkgs:    migrations, Run: "^TestFenceTruncateGuard$",
	},
	{
		Name: "truncate-guard-parameterized", Area: "fencing",
		File:    "migrations/00006_fencing_statement_check.sql",
		Search:  "    IF TG_NARGS > 2" + truncateParamUp,
		Replace: "    IF false" + truncateParamUp,
		Promise: "a TRUNCATE of a table fenced by a parameterized lock is refused (LF003)",
		Pkgs:    migrations, Run: "^TestFenceParameterized",
	},

	// ---- fencing: the Go side ----
	{
		Name: "classify-lf004-not-stale", Area: "fencing",
		File:    "pgadvisory/classify.go",
		Search:  `case code == "LF001", code == "LF004":`,
		Replace: `case code == "LF001":`,
		Promise: "a sequence behind a published token is reported as ErrStaleToken",
		Pkgs:    pgadvisory, Run: "^(TestFencingPublishRefusesToGoBack|TestLeadSequenceBehind)$",
	},
	{
		Name: "fence-publish-step-named-lock", Area: "fencing",
		File:    "pgadvisory/fencing.go",
		Search:  "\t\treturn \"publish\"\n",
		Replace: "\t\treturn \"lock\"\n",
		Promise: "an error of the publish is reported with Op \"publish\", not as a failure to lock",
		Pkgs:    pgadvisory, Run: "^TestFencingPublishRefusesToGoBack$",
	},

	// ---- run-once ----
	{
		Name: "runonce-ledger-no-primary-key", Area: "run-once",
		File:    "migrations/00002_fencing.sql",
		Search:  "    finished_at timestamptz NOT NULL,\n    PRIMARY KEY (lock_id, window_key)",
		Replace: "    finished_at timestamptz NOT NULL",
		Promise: "the ledger's primary key makes a second successful run of a window impossible",
		Pkgs:    migrations, Run: "^TestRunOnceLedgerPrimaryKey$",
	},
	{
		Name: "runonce-finish-not-at-commit", Area: "run-once",
		File:    "migrations/00004_run_once_finish.sql",
		Search:  "    WHERE lock_id = NEW.lock_id AND window_key = NEW.window_key;",
		Replace: "    WHERE false;",
		Promise: "finished_at is the time the run committed",
		Pkgs:    migrations, Run: "^TestRunOnceFinishedAtCommit$",
	},
	{
		Name: "runonce-claim-without-lock", Area: "run-once",
		File:    "internal/sqlcpgx/runonce.sql.go",
		Search:  "WHERE current_setting('pgadvisory.granted', true) = 'on'\n",
		Replace: "",
		Promise: "a window is claimed only by a call that was granted the lock",
		Pkgs:    pgadvisory, Run: "^TestRunOnce(Ledger|Replicas)$",
	},
	{
		Name: "runonce-done-window-runs-again", Area: "run-once",
		File:    "pgadvisory/runonce.go",
		Search:  "\tif !claimed {\n",
		Replace: "\tif false {\n",
		Promise: "a window already done is not run again (ErrAlreadyDone)",
		Pkgs:    pgadvisory, Run: "^TestRunOnceLedger$",
	},
	{
		Name: "window-repeated-hour-end", Area: "run-once",
		File:    "pgadvisory/windows.go",
		Search:  "return back > 0 && lt.Sub(start) < back",
		Replace: "return back > 0 && lt.Sub(start) <= back",
		Promise: "the instant a repeated hour ends is the plain hour's window, not the repeated one's",
		Pkgs:    pgadvisory, Run: "^TestRunOnceWindows",
	},
	{
		Name: "window-repeated-hour-ignored", Area: "run-once",
		File:    "pgadvisory/windows.go",
		Search:  "\tif repeatedWallClock(lt) {\n",
		Replace: "\tif false {\n",
		Promise: "the two occurrences of a repeated hour are different windows",
		Pkgs:    pgadvisory, Run: "^TestRunOnceWindows",
	},

	// ---- elections ----
	{
		Name: "elect-without-lock", Area: "election",
		File:    "migrations/00007_leader.sql",
		Search:  "    IF NOT pg_catalog.pg_try_advisory_xact_lock(p_lock_id)\n       OR NOT pg_catalog.pg_advisory_unlock(p_lock_id) THEN",
		Replace: "    IF NOT pg_catalog.pg_try_advisory_xact_lock(p_lock_id) THEN",
		Promise: "only a session holding the lock at session level, exclusively, is elected",
		Pkgs:    migrations, Run: "^TestLeaderElectRefusesCallerWithoutTheLock$",
	},
	{
		Name: "elect-equal-term-update", Area: "election",
		File:    "migrations/00007_leader.sql",
		Search:  "    WHERE f.lock_id = p_lock_id AND f.token < term;",
		Replace: "    WHERE f.lock_id = p_lock_id AND f.token <= term;",
		Promise: "a term is published only over a smaller token: a sequence set back to the published token raises LF004",
		Pkgs:    pgadvisory, Run: "^TestLeadSequence",
	},
	{
		Name: "elect-equal-term-insert", Area: "election",
		File:    "migrations/00007_leader.sql",
		Search:  "        WHERE f.token < excluded.token;\n    END IF;",
		Replace: "        WHERE f.token <= excluded.token;\n    END IF;",
		Promise: "a term is published only over a smaller token (the INSERT path)",
		Pkgs:    pgadvisory, Run: "^TestLeadSequence",
	},
	{
		Name: "elect-no-lf004", Area: "election",
		File:    "migrations/00007_leader.sql",
		Search:  "    IF NOT FOUND THEN\n        SELECT f.token INTO v_current",
		Replace: "    IF false THEN\n        SELECT f.token INTO v_current",
		Promise: "an election with a sequence behind the published token fails with LF004",
		Pkgs:    pgadvisory, Run: "^TestLeadSequenceBehind$",
	},
	{
		Name: "elect-publish-no-timeout", Area: "election",
		File:    "migrations/00007_leader.sql",
		Search:  "    v_set := pg_catalog.set_config('lock_timeout', p_publish_timeout, true);\n    term :=",
		Replace: "    term :=",
		Promise: "an election waits at most the publish timeout for writers of the previous term",
		Pkgs:    migrations, Run: "^TestLeaderElectPublishRules$",
	},
	{
		Name: "elect-keeps-old-term", Area: "election",
		File:    "migrations/00007_leader.sql",
		Search:  "SET holder = p_holder, term = leader_elect.term, pid = v_pid",
		Replace: "SET holder = p_holder, pid = v_pid",
		Promise: "the leader's record carries the term just published",
		Pkgs:    pgadvisory, Run: "^TestCurrentLeader",
	},
	{
		Name: "current-leader-any-term", Area: "election",
		File:    "migrations/00007_leader.sql",
		Search:  "JOIN pgadvisory.fence AS f ON f.lock_id = l.lock_id AND f.token = l.term\n",
		Replace: "JOIN pgadvisory.fence AS f ON f.lock_id = l.lock_id\n",
		Promise: "CurrentLeader names a leader only while its term is the published token",
		Pkgs:    pgadvisory, Run: "^TestCurrentLeader",
	},
	{
		Name: "current-leader-any-pid", Area: "election",
		File:    "migrations/00007_leader.sql",
		Search:  "      AND k.pid = l.pid\n",
		Replace: "",
		Promise: "CurrentLeader names a leader only while its own backend holds the lock",
		Pkgs:    pgadvisory, Run: "^TestCurrentLeader",
	},
	{
		Name: "current-leader-reused-pid", Area: "election",
		File:    "migrations/00007_leader.sql",
		Search:  "      AND (a.backend_start IS NULL OR a.backend_start < l.elected_at))",
		Replace: ")",
		Promise: "CurrentLeader does not name a backend that merely reuses the leader's pid",
		Pkgs:    pgadvisory, Run: "^TestCurrentLeaderIsTheSameBackend$",
	},
	{
		Name: "status-leader-reused-pid", Area: "election",
		File:    "migrations/00007_leader.sql",
		Search:  "      AND (a.backend_start IS NULL OR a.backend_start < e.elected_at)\n",
		Replace: "",
		Promise: "the status view's leader columns name a backend only if it started before the election",
		Pkgs:    migrations, Run: "^TestStatusViewLeader",
	},
	{
		Name: "status-leader-any-term", Area: "election",
		File:    "migrations/00007_leader.sql",
		Search:  "      AND EXISTS (SELECT 1 FROM pgadvisory.fence AS f WHERE f.lock_id = e.lock_id AND f.token = e.term)\n",
		Replace: "",
		Promise: "the status view's leader columns name a leader only while its term is the published token",
		Pkgs:    migrations, Run: "^TestStatusViewLeader",
	},

	// ---- loss of a session lock: shared connections ----
	{
		Name: "shared-unlock-failure-ignored", Area: "loss",
		File:    "pgadvisory/session_muxrun.go",
		Search:  "\t\tsc.fail(fmt.Errorf(\"an unlock on it failed: %w\", err))\n\t\treturn nil, fmt.Errorf(\"the unlock failed; the connection was closed, so the server releases the locks: %w\", err)",
		Replace: "\t\tsc.fail(fmt.Errorf(\"an unlock on it failed: %w\", err))\n\t\treturn nil, nil",
		Promise: "a release whose unlock fails reports ErrLockLost",
		Pkgs:    pgadvisory, Run: "^TestSessionReleaseFindsLockLost$",
	},

	// ---- loss of a session lock: dedicated connections (SetSessionConns(db, 0)) ----
	{
		Name: "release-loss-ignored", Area: "loss",
		File:    "pgadvisory/session.go",
		Search:  "\tcase unreleased != nil:\n",
		Replace: "\tcase false:\n",
		Promise: "a release that finds the lock gone returns ErrLockLost, whatever fn returned",
		Pkgs:    pgadvisory, Run: "^TestSessionReleaseFindsLockLost$",
	},
	{
		Name: "terminated-backend-not-conn-lost", Area: "loss",
		File:    "pgadvisory/classify.go",
		Search:  `case code == "57P01", code == "57P02",`,
		Replace: `case code == "57P02",`,
		Promise: "a terminated backend (57P01) is a lost connection",
		Pkgs:    pgadvisory, Run: "^(TestSessionLockLost|TestFaultKillDuringCommit)",
	},
	{
		Name: "session-standby-accepted", Area: "loss",
		File:    "pgadvisory/session.go",
		Search:  "\tif standby {\n\t\tconn.release() // nothing was lifted on a standby",
		Replace: "\tif false {\n\t\tconn.release() // nothing was lifted on a standby",
		Promise: "a session lock on a hot standby is refused (ErrStandby)",
		Pkgs:    pgadvisory, Run: "^TestStandbyRefusesEveryFrontDoor$",
	},

	// ---- the outcome of a COMMIT ----
	{
		Name: "commit-interrupted-as-sent", Area: "commit",
		File:    "pgadvisory/protocol.go",
		Search:  "\tcase pgconn.SafeToRetry(err) && errors.Is(err, errInterrupted):\n\t\treturn false",
		Replace: "\tcase pgconn.SafeToRetry(err) && errors.Is(err, errInterrupted):\n\t\treturn true",
		Promise: "a COMMIT that ctx stopped before pgx wrote it committed nothing (not ErrCommitUnknown)",
		Pkgs:    pgadvisory, Run: "^TestCommitContextDoneBeforeCommit$",
	},
	{
		Name: "commit-fatal-as-answer", Area: "commit",
		File:    "pgadvisory/classify.go",
		Search:  "\tcase code != \"\" && !fatal(err):",
		Replace: "\tcase code != \"\":",
		Promise: "a backend killed during COMMIT leaves the outcome unknown (ErrCommitUnknown), never \"nothing committed\"",
		Pkgs:    pgadvisory, Run: "^TestFaultKillDuringCommit",
	},
	{
		Name: "commit-rollback-answer-unknown", Area: "commit",
		File:    "pgadvisory/classify.go",
		Search:  "\tcase errors.Is(err, pgx.ErrTxCommitRollback):\n\t\treturn nil",
		Replace: "\tcase errors.Is(err, pgx.ErrTxCommitRollback):\n\t\treturn ErrCommitUnknown",
		Promise: "a COMMIT answered by ROLLBACK is a definite answer: nothing committed",
		Pkgs:    pgadvisory, Run: "^TestFailCommitRejected$",
	},
	{
		Name: "commit-25P03-unknown", Area: "commit",
		File:    "pgadvisory/classify.go",
		Search:  "\tcase code == \"25P03\":\n\t\treturn ErrConnLost",
		Replace: "\tcase code == \"25P03\":\n\t\treturn ErrCommitUnknown",
		Promise: "a session ended by idle_in_transaction_session_timeout (25P03) never read COMMIT: nothing committed",
		Pkgs:    pgadvisory, Run: "^TestFail",
	},
}
