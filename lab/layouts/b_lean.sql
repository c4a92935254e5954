-- Layout B: today's job table and statements, less the index entries the hot transitions
-- write for no query that needs them.
--
-- * jobs_job_finished (state, finished_at) goes: every finishing job wrote it beside
--   jobs_job_console_state (state, id), which prune can walk instead, its ids bounded by
--   the cutoff (a job created after the cutoff cannot have finished before it).
-- * jobs_job_lease keys running rows by claim token instead of lease expiry: the reaper reads
--   the running rows (what the workers hold) and sorts them, and the heartbeat and the start
--   mark, which change only lease_expires_at and started_attempt, no longer change an
--   indexed column, so they can be HOT updates.
-- name: schema
DROP INDEX jobs_job_finished;
DROP INDEX jobs_job_lease;
CREATE INDEX jobs_job_lease ON jobs_job (worker_id) WHERE state = 'running';
