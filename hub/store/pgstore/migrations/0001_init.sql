-- Schema 1: the hub's records (hub/store), the leader lease and job output.
-- Records are kept as the JSON of their Go struct (bytea, byte for byte);
-- the columns beside them exist only to key, order and select them.

-- The leader lease: one row. epoch grows by one with every new holder;
-- expires is on the database's clock. Every fenced write reads this row
-- FOR SHARE in its own transaction, so it either commits before a new
-- holder takes the row or sees the newer epoch and is refused.
CREATE TABLE vk_lease (
	name    text PRIMARY KEY,
	holder  text NOT NULL,
	epoch   bigint NOT NULL,
	expires timestamptz NOT NULL
);
INSERT INTO vk_lease (name, holder, epoch, expires) VALUES ('leader', '', 0, '-infinity');

CREATE TABLE vk_jobs (
	id      text PRIMARY KEY,
	settled boolean NOT NULL,
	rec     bytea NOT NULL
);

CREATE TABLE vk_admissions (
	id  text PRIMARY KEY,
	rec bytea NOT NULL
);

-- created is Unix nanoseconds (timestamptz keeps only microseconds).
CREATE TABLE vk_answers (
	principal  text NOT NULL,
	request_id text NOT NULL,
	job        text NOT NULL,
	created    bigint NOT NULL,
	dropped    boolean NOT NULL DEFAULT false,
	rec        bytea NOT NULL,
	PRIMARY KEY (principal, request_id)
);
CREATE INDEX vk_answers_job ON vk_answers (job) WHERE job <> '';
CREATE INDEX vk_answers_created ON vk_answers (created);

CREATE TABLE vk_approvals (
	instance text NOT NULL,
	project  bigint NOT NULL,
	rec      bytea NOT NULL,
	PRIMARY KEY (instance, project)
);

CREATE TABLE vk_principals (
	id  text PRIMARY KEY,
	rec bytea NOT NULL
);

CREATE TABLE vk_tokens (
	hash    bytea PRIMARY KEY,
	created bigint NOT NULL,
	rec     bytea NOT NULL
);

-- Audit sequence numbers come from a counter row, not a SEQUENCE, so a
-- rolled-back append (a refused write) leaves no gap.
CREATE TABLE vk_counters (
	name  text PRIMARY KEY,
	value bigint NOT NULL
);
INSERT INTO vk_counters (name, value) VALUES ('audit', 0);

CREATE TABLE vk_audit (
	seq bigint PRIMARY KEY,
	rec bytea NOT NULL
);

CREATE TABLE vk_meta (
	key   text PRIMARY KEY,
	value bytea NOT NULL
);

-- Job output: append-only chunks keyed by their start offset, and per job
-- its length and whether it is complete.
CREATE TABLE vk_output (
	job       text PRIMARY KEY,
	length    bigint NOT NULL DEFAULT 0,
	complete  boolean NOT NULL DEFAULT false
);
CREATE TABLE vk_output_chunks (
	job    text NOT NULL REFERENCES vk_output (job) ON DELETE CASCADE,
	off    bigint NOT NULL,
	data   bytea NOT NULL,
	PRIMARY KEY (job, off)
);
