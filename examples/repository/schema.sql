-- The example's one table: a daily report that must be sent exactly once.
-- main.go creates it in a private schema and drops that schema at the end.
CREATE TABLE reports (
    day     date PRIMARY KEY,
    sent_at timestamptz,
    sent_by text
);
