-- pgbench script: the reference, a one-row autocommit INSERT into a narrow table (as
-- scripts/bench's bare_insert_per_s). Make the table first:
--   CREATE TABLE pgb_bare (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
--                          at timestamptz NOT NULL DEFAULT now());
INSERT INTO pgb_bare DEFAULT VALUES;
