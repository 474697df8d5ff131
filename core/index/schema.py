"""The SQLite schema, as an ordered list of migrations.

`PRAGMA user_version` records how many migrations a file has had. A migration is appended,
never edited: an index written by an older whyjob is brought forward on open, and one written
by a newer whyjob is refused (errors.IndexTooNew).

Every index below serves a named query in sqlite.py; see docs/index.md for the mapping.
"""

from __future__ import annotations

__all__ = ["MIGRATIONS", "SCHEMA_VERSION"]

_V1 = """
-- One row per evidence record. `id` is the deterministic 63-bit hash (evidence.evidence_id)
-- and the dedup key; `seq` is the insertion order, so the table and the full-text index grow
-- by appending (random-order rowids made inserts twice as slow).
CREATE TABLE evidence (
    seq         INTEGER PRIMARY KEY,
    id          INTEGER NOT NULL UNIQUE,
    ts          INTEGER NOT NULL,            -- ms since epoch, UTC
    ts_end      INTEGER,
    source      TEXT    NOT NULL,
    kind        TEXT    NOT NULL,
    severity    INTEGER NOT NULL,
    cluster     TEXT,
    namespace   TEXT,
    experiment  TEXT,
    pod         TEXT,
    pod_uid     TEXT,
    container   TEXT,
    node        TEXT,
    instance_id TEXT,
    gpu_uuid    TEXT,
    asg         TEXT,
    message     TEXT    NOT NULL,
    attrs       TEXT,                        -- JSON object
    origin      TEXT                         -- file:line or collector cursor
);
-- The explain queries: everything about a pod, a node, an instance, a GPU or an ASG in a window.
-- Log lines are the bulk of a pod's records and are read only as the tail before a termination,
-- so they get their own index and stay out of the one the explain query scans.
CREATE INDEX evidence_pod      ON evidence(pod_uid, ts)      WHERE pod_uid IS NOT NULL AND kind <> 'log.line';
CREATE INDEX evidence_pod_tail ON evidence(pod_uid, container, ts) WHERE pod_uid IS NOT NULL AND kind = 'log.line';
CREATE INDEX evidence_pod_name ON evidence(pod, ts)          WHERE pod IS NOT NULL AND pod_uid IS NULL;
CREATE INDEX evidence_node     ON evidence(node, ts)         WHERE node IS NOT NULL AND pod_uid IS NULL;
CREATE INDEX evidence_instance ON evidence(instance_id, ts)  WHERE instance_id IS NOT NULL AND pod_uid IS NULL;
CREATE INDEX evidence_gpu      ON evidence(gpu_uuid, ts)     WHERE gpu_uuid IS NOT NULL AND pod_uid IS NULL;
CREATE INDEX evidence_asg      ON evidence(asg, ts)          WHERE asg IS NOT NULL AND pod_uid IS NULL;
CREATE INDEX evidence_experiment ON evidence(experiment, ts) WHERE experiment IS NOT NULL AND pod_uid IS NULL;

-- The record as its source gave it, kept apart so the hot table stays narrow.
CREATE TABLE raw (
    seq  INTEGER PRIMARY KEY,                -- = evidence.seq
    body BLOB NOT NULL
);

-- Full-text search over messages; external content, so the text is stored once. It is
-- brought up to date on demand (SqliteIndex.sync_search), not on every insert: tokenizing
-- costs as much as everything else an import does.
CREATE VIRTUAL TABLE evidence_fts USING fts5(
    message, content='evidence', content_rowid='seq', tokenize='unicode61'
);

-- Pods we know of: one row per pod incarnation (uid), with its experiment and rank.
CREATE TABLE pods (
    uid         TEXT PRIMARY KEY,
    namespace   TEXT NOT NULL,
    name        TEXT NOT NULL,
    experiment  TEXT,
    launcher    TEXT,
    label       TEXT,                        -- the label the experiment was recognised by
    rank        TEXT,
    job_attempt INTEGER,
    node        TEXT,
    created     INTEGER,
    deleted     INTEGER,
    phase       TEXT,
    gpus        INTEGER,                     -- nvidia.com/gpu requested
    labels      TEXT,                        -- JSON
    first_seen  INTEGER NOT NULL,
    last_seen   INTEGER NOT NULL
);
CREATE INDEX pods_experiment ON pods(experiment, namespace) WHERE experiment IS NOT NULL;
CREATE INDEX pods_name       ON pods(name, namespace);

-- Experiments, as recognised from pod labels.
CREATE TABLE experiments (
    namespace   TEXT NOT NULL,
    name        TEXT NOT NULL,
    launcher    TEXT NOT NULL,
    label       TEXT NOT NULL,
    first_seen  INTEGER NOT NULL,
    last_seen   INTEGER NOT NULL,
    PRIMARY KEY (name, namespace)
) WITHOUT ROWID;

-- Entity bindings over time: pod.node, node.instance, gpu.node, pod.gpu, instance.asg.
-- A binding holds from first_ts to last_ts as far as the evidence shows.
CREATE TABLE bindings (
    kind     TEXT NOT NULL,
    subject  TEXT NOT NULL,
    object   TEXT NOT NULL,
    first_ts INTEGER NOT NULL,
    last_ts  INTEGER NOT NULL,
    attrs    TEXT,
    PRIMARY KEY (kind, subject, object)
) WITHOUT ROWID;
CREATE INDEX bindings_object ON bindings(kind, object);

-- Records that could not be read: kept with the reason, never silently dropped.
CREATE TABLE quarantine (
    id       INTEGER PRIMARY KEY AUTOINCREMENT,
    at       INTEGER NOT NULL,               -- when it was rejected
    origin   TEXT    NOT NULL,               -- file:line
    format   TEXT,
    reason   TEXT    NOT NULL,
    body     BLOB
);

-- Resume tokens per source (watch resourceVersions, file offsets, pagination cursors).
CREATE TABLE checkpoints (
    source  TEXT PRIMARY KEY,
    token   TEXT NOT NULL,
    updated INTEGER NOT NULL
);

-- Which files were imported, so `whyjob ingest` of the same tree says what it skipped.
CREATE TABLE imports (
    id       INTEGER PRIMARY KEY AUTOINCREMENT,
    at       INTEGER NOT NULL,
    origin   TEXT    NOT NULL,
    format   TEXT    NOT NULL,
    read     INTEGER NOT NULL,
    stored   INTEGER NOT NULL,
    duplicate INTEGER NOT NULL,
    rejected INTEGER NOT NULL
);
"""

_V2 = """
-- Which pods ran on a node: the bad-node record looks across experiments.
CREATE INDEX pods_node ON pods(node, last_seen) WHERE node IS NOT NULL;
"""

_V3 = """
-- The fleet view reads every GPU fault and node condition in a window, across experiments.
-- The kinds are listed as core/index/sqlite.py's FLEET_KINDS: a query uses this partial index
-- only when it names the same list.
CREATE INDEX evidence_fleet ON evidence(kind, ts) WHERE kind IN ('gpu.xid', 'node.condition');

-- Documents derived from the evidence, kept so they are not recomputed on every read (the
-- fleet view's per-experiment runs). Each has a stamp saying what it was made from; a reader
-- that finds the stamp out of date recomputes it. Dropping the table loses nothing.
CREATE TABLE derived (
    kind    TEXT NOT NULL,
    key     TEXT NOT NULL,
    stamp   TEXT NOT NULL,
    made    INTEGER NOT NULL,                -- the evidence seq it had seen
    body    BLOB NOT NULL,
    PRIMARY KEY (kind, key)
) WITHOUT ROWID;
"""

_V4 = """
-- Several clusters in one index: a pod and an experiment belong to a cluster. Experiments are
-- keyed by cluster too ('' where none was named), so two clusters' ml/llama-run9 stay apart.
ALTER TABLE pods ADD COLUMN cluster TEXT;
CREATE TABLE experiments_v4 (
    namespace   TEXT NOT NULL,
    name        TEXT NOT NULL,
    cluster     TEXT NOT NULL DEFAULT '',
    launcher    TEXT NOT NULL,
    label       TEXT NOT NULL,
    first_seen  INTEGER NOT NULL,
    last_seen   INTEGER NOT NULL,
    PRIMARY KEY (name, namespace, cluster)
) WITHOUT ROWID;
INSERT INTO experiments_v4 (namespace, name, cluster, launcher, label, first_seen, last_seen)
    SELECT namespace, name, '', launcher, label, first_seen, last_seen FROM experiments;
DROP TABLE experiments;
ALTER TABLE experiments_v4 RENAME TO experiments;
"""

_V5 = """
-- Retention drops the oldest records of one kind at a time (core/retention.py), and `stats`
-- counts records by kind: both read this index instead of the whole table.
CREATE INDEX evidence_kind ON evidence(kind, ts);
"""

_V6 = """
-- A binding belongs to the cluster whose names it holds: gpu-node-0 of two clusters is two
-- nodes, with their own instances and GPUs ('' where no cluster was named).
CREATE TABLE bindings_v6 (
    kind     TEXT NOT NULL,
    subject  TEXT NOT NULL,
    object   TEXT NOT NULL,
    cluster  TEXT NOT NULL DEFAULT '',
    first_ts INTEGER NOT NULL,
    last_ts  INTEGER NOT NULL,
    attrs    TEXT,
    PRIMARY KEY (kind, subject, object, cluster)
) WITHOUT ROWID;
INSERT INTO bindings_v6 (kind, subject, object, first_ts, last_ts, attrs)
    SELECT kind, subject, object, first_ts, last_ts, attrs FROM bindings;
DROP TABLE bindings;
ALTER TABLE bindings_v6 RENAME TO bindings;
CREATE INDEX bindings_object ON bindings(kind, object);
"""

MIGRATIONS: tuple[str, ...] = (_V1, _V2, _V3, _V4, _V5, _V6)
SCHEMA_VERSION = len(MIGRATIONS)
