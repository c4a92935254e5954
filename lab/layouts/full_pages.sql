-- A variant of a layout: its job table's pages filled to 100% by inserts, as before
-- jobs/migrations/0018_job_fillfactor.py (today's table leaves 30% of each page for the
-- new versions its rows' updates write).
-- name: schema
ALTER TABLE jobs_job SET (fillfactor = 100);
