-- Layout B: today's job table and statements, with running rows indexed by lease expiry as
-- before migration 0020 (jobs_job_lease) instead of by claim token (jobs_job_holder): the
-- heartbeat and the start mark then change an indexed column, and cannot be HOT updates.
-- name: schema
DROP INDEX jobs_job_holder;
CREATE INDEX jobs_job_lease ON jobs_job (lease_expires_at) WHERE state = 'running';
