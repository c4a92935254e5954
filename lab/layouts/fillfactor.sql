-- A variant of a layout: its job table's pages filled to 70% by inserts, so the new version
-- of a row an update writes finds room on the row's own page (a HOT update needs it; any
-- update logs less when the old and new versions share a page).
-- name: schema
ALTER TABLE jobs_job SET (fillfactor = 70);
