-- Layout B: today's job table and statements, with jobs_job_lease keyed by claim token
-- instead of lease expiry: the reaper reads the running rows (what the workers hold) and
-- sorts them, and the heartbeat and the start mark, which change only lease_expires_at and
-- started_attempt, no longer change an indexed column, so they can be HOT updates.
-- (Layout B once also left out jobs_job_finished; migration 0019 dropped it from the
-- engine, and pruning walks jobs_job_console_state.)
-- name: schema
DROP INDEX jobs_job_lease;
CREATE INDEX jobs_job_lease ON jobs_job (worker_id) WHERE state = 'running';
