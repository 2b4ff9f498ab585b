package main

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
)

// The account whose balance the billing day closes, its balance before the
// close and the day's charges.
const (
	account        = "acme"
	openingBalance = 100
	dayCharges     = 40
)

// store is the example's private schema: the reports outbox and the fenced
// balances table.
type store struct {
	admin  *sql.DB
	schema string
	day    string
}

// newStore creates the private schema and its tables, and clears the run-once
// ledger row a previous run of this example left for day (the ledger is
// lockgen's, shared by the database; this example owns its row).
func newStore(ctx context.Context, admin *sql.DB, day string) (*store, error) {
	s := &store{admin: admin, schema: "dailyreport_" + randomSuffix(), day: day}
	stmts := []string{
		`CREATE SCHEMA ` + s.schema,
		`CREATE TABLE ` + s.schema + `.reports (
			id      bigserial PRIMARY KEY,
			day     text NOT NULL,
			status  text NOT NULL,
			sent_by text NOT NULL)`,
		`CREATE TABLE ` + s.schema + `.balances (
			account text PRIMARY KEY,
			balance bigint NOT NULL)`,
		`INSERT INTO ` + s.schema + `.balances VALUES ('` + account + `', ` + strconv.Itoa(openingBalance) + `)`,
	}
	// What "lockgen fence -lock billing.close_day -table <schema>.balances"
	// generates: from now on every write needs the current token.
	stmts = append(stmts, fenceStatements(s.schema+".balances", BillingCloseDay.ID)...)
	for _, q := range stmts {
		if _, err := admin.ExecContext(ctx, q); err != nil {
			_ = s.drop(ctx)
			return nil, fmt.Errorf("dailyreport: create tables: %w", err)
		}
	}
	if err := s.clearLedger(ctx); err != nil {
		_ = s.drop(ctx)
		return nil, err
	}
	return s, nil
}

// clearLedger deletes this example's run-once row for the day, so the
// example can be run again the same day.
func (s *store) clearLedger(ctx context.Context) error {
	_, err := s.admin.ExecContext(ctx, `DELETE FROM pgadvisory.run_once WHERE lock_id = $1 AND window_key = $2`, ReportsDailyEmail.ID, s.day)
	if err != nil {
		return fmt.Errorf("dailyreport: clear run-once ledger: %w", err)
	}
	return nil
}

// drop removes the private schema and the ledger row.
func (s *store) drop(ctx context.Context) error {
	if _, err := s.admin.ExecContext(ctx, `DROP SCHEMA IF EXISTS `+s.schema+` CASCADE`); err != nil {
		return fmt.Errorf("dailyreport: drop schema %s: %w", s.schema, err)
	}
	return s.clearLedger(ctx)
}

// sendReport is the report job's body: it records the e-mail as sent in the
// outbox, in the run-once transaction.
func (s *store) sendReport(ctx context.Context, tx *sql.Tx, by string) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO `+s.schema+`.reports (day, status, sent_by) VALUES ($1, 'sent', $2)`, s.day, by)
	return err
}

// sentReports counts the day's sent reports.
func (s *store) sentReports(ctx context.Context) (int, error) {
	var n int
	err := s.admin.QueryRowContext(ctx, `SELECT count(*) FROM `+s.schema+`.reports WHERE day = $1 AND status = 'sent'`, s.day).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("dailyreport: count reports: %w", err)
	}
	return n, nil
}

// addCharges closes the day for the account: balance += the day's charges.
// It returns the new balance.
func (s *store) addCharges(ctx context.Context, tx *sql.Tx) (int64, error) {
	var b int64
	err := tx.QueryRowContext(ctx, `UPDATE `+s.schema+`.balances SET balance = balance + $1 WHERE account = $2 RETURNING balance`, dayCharges, account).Scan(&b)
	return b, err
}

// balance reads the account's balance.
func (s *store) balance(ctx context.Context) (int64, error) {
	var b int64
	if err := s.admin.QueryRowContext(ctx, `SELECT balance FROM `+s.schema+`.balances WHERE account = $1`, account).Scan(&b); err != nil {
		return 0, fmt.Errorf("dailyreport: read balance: %w", err)
	}
	return b, nil
}

// fenceStatements are the statements of the migration that lockgen fence
// writes for table and a plain lock (without its checks that lockgen's
// schema exists and that the table is no partition): a column that stamps
// each row with its writer's token, a row trigger that keeps the stamp
// right, statement triggers that check each write against the published
// token, a TRUNCATE guard, and the table listed as fenced by the lock
// (pgadvisory.fence_register).
func fenceStatements(table string, lockID int64) []string {
	args := "'" + strconv.FormatInt(lockID, 10) + "', 'strict'"
	check := ` FOR EACH STATEMENT EXECUTE FUNCTION pgadvisory.fence_check_statement(` + args + `)`
	return []string{
		`ALTER TABLE ` + table + ` ADD COLUMN fencing_token bigint
			DEFAULT NULLIF(current_setting('pgadvisory.fencing_token', true), '')::bigint`,
		`CREATE TRIGGER zz_pgadvisory_fence BEFORE INSERT OR UPDATE ON ` + table + ` FOR EACH ROW
			WHEN (NEW.fencing_token IS DISTINCT FROM NULLIF(current_setting('pgadvisory.fencing_token', true), '')::bigint)
			EXECUTE FUNCTION pgadvisory.fence_stamp(` + args + `)`,
		`CREATE TRIGGER zz_pgadvisory_fence_insert AFTER INSERT ON ` + table + ` REFERENCING NEW TABLE AS fence_new` + check,
		`CREATE TRIGGER zz_pgadvisory_fence_update AFTER UPDATE ON ` + table + ` REFERENCING OLD TABLE AS fence_old NEW TABLE AS fence_new` + check,
		`CREATE TRIGGER zz_pgadvisory_fence_delete AFTER DELETE ON ` + table + ` REFERENCING OLD TABLE AS fence_old` + check,
		`CREATE TRIGGER zz_pgadvisory_fence_truncate BEFORE TRUNCATE ON ` + table + `
			FOR EACH STATEMENT EXECUTE FUNCTION pgadvisory.fence_truncate_guard(` + args + `)`,
		`SELECT pgadvisory.fence_register('` + table + `'::regclass, ` + args + `, '{}')`,
	}
}
