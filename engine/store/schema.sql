-- headprune results database, schema version 11 (2 added ablation_means;
-- 3 added gradients and unit_scores, for the gradient studies; 4 added
-- role_runs, head_roles and sweep_roles, for head roles; gate_runs, gate_heads and sweep_gates, for
-- gates studies; 5 added pruned_heads, so queries count the heads a pruned checkpoint has; 6 makes the
-- metrics' columns and the views over them from the metric table, so a metric needs no edit here; 7 added
-- variant_positions and patch_tokens, for patching one position at a time; 8 added role_runs.sep_id and
-- n_sep and head_roles.sep_token, attention to [SEP], which store.c's added_columns adds to an older database;
-- 9 added unit_scores.estimator and base, for the attribution study's estimators, added likewise; 10 added
-- screens, a screen study's verdict; 11 added gradients.from_layer, for gradients of a layer's gates on).
-- Embedded into engine/store/store.c at build time; documented for users in
-- docs/database.md (keep it in step with this file).
-- Every statement is idempotent: it runs on each open for writing, which
-- also brings an older database up to this version.
-- Invariants: a variant row exists only with its result and per-sequence rows
-- (written in one transaction); a sweep_jobs row only for a finished variant.

CREATE TABLE IF NOT EXISTS meta(
  key   TEXT PRIMARY KEY,
  value TEXT NOT NULL
);  -- schema_version, created_by

CREATE TABLE IF NOT EXISTS models(
  id         INTEGER PRIMARY KEY,
  digest     TEXT NOT NULL UNIQUE,   -- XXH3-128 of config.json and every safetensors file
  path       TEXT NOT NULL,
  model_type TEXT NOT NULL,
  n_layers   INTEGER NOT NULL,
  n_heads    INTEGER NOT NULL,
  n_kv_heads INTEGER NOT NULL,
  d_head     INTEGER NOT NULL,
  n_params   INTEGER NOT NULL
);

-- The query heads a pruned checkpoint lacks, one row each (none for a complete
-- checkpoint): a model's heads are n_layers * n_heads less these, and no
-- variant's mask names one (docs/database.md: how heads are counted).
CREATE TABLE IF NOT EXISTS pruned_heads(
  model_id INTEGER NOT NULL REFERENCES models(id),
  layer    INTEGER NOT NULL,
  head     INTEGER NOT NULL,
  PRIMARY KEY(model_id, layer, head)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS datasets(
  id      INTEGER PRIMARY KEY,
  digest  TEXT NOT NULL UNIQUE,      -- XXH3-128 of the loaded ids, labels, masks and shape
  path    TEXT NOT NULL,
  n_seqs  INTEGER NOT NULL,
  seq_len INTEGER NOT NULL
);

CREATE TABLE IF NOT EXISTS plans(
  id     INTEGER PRIMARY KEY,
  digest TEXT NOT NULL UNIQUE,       -- XXH3-128 of the plan text
  name   TEXT NOT NULL,
  path   TEXT NOT NULL,
  text   TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS sweeps(
  id         INTEGER PRIMARY KEY,
  key        TEXT NOT NULL UNIQUE,   -- hash of plan, model and data digests
  plan_id    INTEGER NOT NULL REFERENCES plans(id),
  model_id   INTEGER NOT NULL REFERENCES models(id),
  dataset_id INTEGER NOT NULL REFERENCES datasets(id),
  name       TEXT NOT NULL,
  ablation   TEXT NOT NULL,          -- zero | mean | mean-pos
  metric     TEXT NOT NULL,          -- loss | kl | acc | cos
  created    TEXT NOT NULL,          -- ISO 8601 UTC
  updated    TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS variants(
  id         INTEGER PRIMARY KEY,
  key        TEXT NOT NULL UNIQUE,   -- the job's content address
  model_id   INTEGER NOT NULL REFERENCES models(id),
  dataset_id INTEGER NOT NULL REFERENCES datasets(id),
  ablation   TEXT NOT NULL,
  mask       BLOB NOT NULL,          -- bit (layer * n_heads + head), LSB first: 1 = ablated
  mask_text  TEXT NOT NULL,          -- canonical spec, e.g. '0.3,2.*'; '' = nothing ablated
  n_ablated  INTEGER NOT NULL
);

CREATE TABLE IF NOT EXISTS results(
  variant_id      INTEGER PRIMARY KEY REFERENCES variants(id),
  loss            REAL,              -- a column per metric (the first four here, later ones added by the
  ppl             REAL,              -- store from the metric table); NULL where a metric does not apply
  acc             REAL,
  kl              REAL,
  cos             REAL,
  n_tokens        INTEGER NOT NULL,
  n_seqs          INTEGER NOT NULL,
  wall_s          REAL NOT NULL,
  engine_version  TEXT NOT NULL,
  numeric_version INTEGER NOT NULL,
  host            TEXT NOT NULL,
  threads         INTEGER NOT NULL,
  kernel          TEXT NOT NULL,     -- BLIS kernel set
  created         TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS seq_results(
  variant_id INTEGER NOT NULL REFERENCES variants(id),
  seq        INTEGER NOT NULL,       -- row of the held-out set, from 0
  loss       REAL,
  acc        REAL,
  kl         REAL,
  cos        REAL,
  n_tokens   INTEGER NOT NULL,
  PRIMARY KEY(variant_id, seq)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS sweep_jobs(
  sweep_id   INTEGER NOT NULL REFERENCES sweeps(id),
  ord        INTEGER NOT NULL,       -- deterministic position in the sweep
  variant_id INTEGER NOT NULL REFERENCES variants(id),
  study      TEXT NOT NULL,          -- the study's name in the plan
  kind       TEXT NOT NULL,          -- baseline | single | only | layer | random | explicit | pairs | iterative
                                     -- | iterative-score | gates | gates-frac
  kv         INTEGER NOT NULL,       -- 1: units are KV groups
  label      TEXT NOT NULL,
  layer      INTEGER,                -- single/only/layer/pairs; NULL otherwise
  unit       INTEGER,                -- single: ablated; only: kept; pairs: first
  unit2      INTEGER,                -- pairs: second
  step       INTEGER NOT NULL,       -- iterative step, else 0
  sample     INTEGER NOT NULL,       -- random draw, else 0
  k          INTEGER NOT NULL,       -- units ablated
  PRIMARY KEY(sweep_id, ord)
);
CREATE INDEX IF NOT EXISTS sweep_jobs_variant ON sweep_jobs(variant_id);

-- The views jobs (every finished job of every sweep with its metrics),
-- baselines (each sweep's unablated baseline) and effects (each job against
-- its sweep's baseline, signed so that larger is worse for every metric, as in
-- 'headprune query') are made by the store from the metric table
-- (engine/store/store.c metric_views), as is a column per metric in results and
-- seq_results beyond those above (docs/database.md).

-- Patching one position at a time (a patching study with positions: each): the position at which each
-- such variant replaced its dead heads' outputs (they kept their own at every other position); a variant
-- without a row here replaced them at every position.
CREATE TABLE IF NOT EXISTS variant_positions(
  variant_id INTEGER PRIMARY KEY REFERENCES variants(id),
  position   INTEGER NOT NULL        -- token index in the row, from 0
);

-- The tokens at a patching study's positions, of the held-out set's first row (its rows share one
-- template), so queries and the report can label the positions: on the prompt and on the corrupt
-- prompt (NULL: no corrupt prompts), with their text where the model has a tokenizer (else NULL).
CREATE TABLE IF NOT EXISTS patch_tokens(
  sweep_id     INTEGER NOT NULL REFERENCES sweeps(id),
  study        TEXT NOT NULL,
  position     INTEGER NOT NULL,
  token        INTEGER NOT NULL,
  corrupt      INTEGER,
  text         TEXT,
  corrupt_text TEXT,
  PRIMARY KEY(sweep_id, study, position)
) WITHOUT ROWID;

-- Mean-ablation statistics: each head's output averaged over the real tokens
-- of a held-out set under the unmasked model, computed once per (model, data,
-- numeric version) and reused by every sweep with a mean ablation.
CREATE TABLE IF NOT EXISTS ablation_means(
  model_digest    TEXT NOT NULL,
  data_digest     TEXT NOT NULL,
  numeric_version INTEGER NOT NULL,
  n_layers        INTEGER NOT NULL,
  seq_len         INTEGER NOT NULL,
  width           INTEGER NOT NULL,  -- n_heads * d_head
  mean_all        BLOB NOT NULL,     -- float32 (n_layers, width), little-endian
  mean_pos        BLOB NOT NULL,     -- float32 (n_layers, seq_len, width): per position
  PRIMARY KEY(model_digest, data_digest, numeric_version)
);

-- The gradient of a variant's mean loss at every head's gate (one forward and
-- one backward over the held-out set), content-addressed like variants: the
-- key is the digest of model, data, ablation, the gates (mask_text) and the
-- numeric version, marked as a gradient. Arrays are float64, native byte
-- order (little-endian on every platform headprune builds for), row-major.
CREATE TABLE IF NOT EXISTS gradients(
  id              INTEGER PRIMARY KEY,
  key             TEXT NOT NULL UNIQUE,
  model_id        INTEGER NOT NULL REFERENCES models(id),
  dataset_id      INTEGER NOT NULL REFERENCES datasets(id),
  ablation        TEXT NOT NULL,
  mask_text       TEXT NOT NULL,     -- the heads at gate 0 ('' = none): where the gradient is taken
  n_layers        INTEGER NOT NULL,
  n_heads         INTEGER NOT NULL,
  n_seqs          INTEGER NOT NULL,
  loss            REAL NOT NULL,     -- the mean loss at those gates
  grad            BLOB NOT NULL,     -- (n_layers, n_heads) dL/dgate
  atp             BLOB NOT NULL,     -- (n_layers, n_heads) first-order single-ablation estimates
  seq_grad        BLOB NOT NULL,     -- (n_seqs, n_layers, n_heads) each sequence's share of grad
  wall_s          REAL NOT NULL,
  engine_version  TEXT NOT NULL,
  numeric_version INTEGER NOT NULL,
  host            TEXT NOT NULL,
  threads         INTEGER NOT NULL,
  kernel          TEXT NOT NULL,
  created         TEXT NOT NULL,
  from_layer      INTEGER            -- NULL or 0: every gate's; l: only layers l on were wanted (the others 0)
);

-- Per-unit scores of the gradient studies: importance and attribution
-- studies (step 0), and the ranking each step of an iterative study with
-- rank: gradient pruned by (kind 'iterative', step = the step it led to).
CREATE TABLE IF NOT EXISTS unit_scores(
  sweep_id    INTEGER NOT NULL REFERENCES sweeps(id),
  study       TEXT NOT NULL,
  kind        TEXT NOT NULL,         -- importance | attribution | iterative
  kv          INTEGER NOT NULL,      -- 1: units are KV groups
  step        INTEGER NOT NULL,
  layer       INTEGER NOT NULL,
  unit        INTEGER NOT NULL,
  label       TEXT NOT NULL,         -- '3.2', 'kv:1.0'
  score       REAL NOT NULL,         -- importance: after normalize; attribution: the estimate (the effect on the
                                     -- loss; estimator importance: its size, unsigned)
  raw         REAL NOT NULL,         -- importance: before normalize; attribution: = score
  normalize   TEXT,                  -- importance, iterative: layer | none; attribution: NULL
  gradient_id INTEGER NOT NULL REFERENCES gradients(id), -- integrated gradients: the last along the path
  estimator   TEXT,                  -- attribution: atp | importance | ig | ig-layer (NULL, before 9: atp)
  base        TEXT,                  -- importance, attribution: the study's mask: ('' none; NULL, before 9:
                                     -- the gradient's mask_text)
  PRIMARY KEY(sweep_id, study, step, layer, unit)
) WITHOUT ROWID;

-- Head roles (docs/roles.md): what each query head attends to, from one
-- unmasked pass over a held-out set and one over a probe of random tokens
-- repeated twice. Computed once per (model, data, probe, numeric version):
-- the key is a variant's digest with the mask text marked as roles and the
-- probe's size. One role_runs row a computation, its heads' scores in
-- head_roles, and each sweep's roles study linked to it in sweep_roles.
CREATE TABLE IF NOT EXISTS role_runs(
  id              INTEGER PRIMARY KEY,
  key             TEXT NOT NULL UNIQUE,
  model_id        INTEGER NOT NULL REFERENCES models(id),
  dataset_id      INTEGER NOT NULL REFERENCES datasets(id),
  causal          INTEGER NOT NULL,  -- 1: a decoder (rare_token NULL); 0: an encoder
  probe_seqs      INTEGER NOT NULL,  -- probe rows
  probe_len       INTEGER NOT NULL,  -- random tokens a half: each row is 2 probe_len tokens
  probe_seed      INTEGER NOT NULL,
  n_queries       INTEGER NOT NULL,  -- queries behind entropy, the dominant offset and rare_token
  n_prev          INTEGER NOT NULL,  -- ... behind prev_token
  n_duplicate     INTEGER NOT NULL,  -- ... behind duplicate_token
  n_first         INTEGER NOT NULL,  -- ... behind first_token
  n_induction     INTEGER NOT NULL,  -- probe queries behind induction
  wall_s          REAL NOT NULL,
  engine_version  TEXT NOT NULL,
  numeric_version INTEGER NOT NULL,
  host            TEXT NOT NULL,
  threads         INTEGER NOT NULL,
  kernel          TEXT NOT NULL,
  created         TEXT NOT NULL,
  sep_id          INTEGER,           -- 8: the model's [SEP] id; NULL: it has none (or the run predates 8)
  n_sep           INTEGER            -- 8: queries behind sep_token
);

-- One row per query head the model has (a pruned checkpoint's missing heads
-- have none). A score is NULL where no query qualifies (docs/roles.md).
CREATE TABLE IF NOT EXISTS head_roles(
  run_id           INTEGER NOT NULL REFERENCES role_runs(id),
  layer            INTEGER NOT NULL,
  head             INTEGER NOT NULL,  -- query head (GQA too)
  prev_token       REAL,              -- mean attention to the previous position
  duplicate_token  REAL,              -- ... to other (causal: earlier) occurrences of the query's token
  induction        REAL,              -- probe: ... to the token after the earlier occurrence
  induction_offset INTEGER,           -- probe: offset from the earlier occurrence (-4..4) with most attention
  induction_mass   REAL,              -- ... and its mean attention
  first_token      REAL,              -- ... to the first real position
  dominant_offset  INTEGER,           -- key - query holding the largest share of the attention
  dominant_mass    REAL,              -- ... and that share
  entropy          REAL,              -- mean attention entropy, bits
  rare_token       REAL,              -- encoders: ... to the sequence's least frequent token; NULL for decoders
  sep_token        REAL,              -- 8: ... to the sequence's [SEP] tokens; NULL when the model has none
  PRIMARY KEY(run_id, layer, head)
) WITHOUT ROWID;

-- A screen study's verdict, written once it stopped (docs/plans.md, "Screen"): its evaluations are sweep_jobs
-- of kind 'screen' (step: the evaluation's place, sample: 0 the walk, r the r-th audit), its estimates
-- unit_scores of kind 'screen'. The exact top k are the k evaluated units with the largest effects (ties: the
-- larger estimate in size, then plan order).
CREATE TABLE IF NOT EXISTS screens(
  sweep_id    INTEGER NOT NULL REFERENCES sweeps(id),
  study       TEXT NOT NULL,
  kv          INTEGER NOT NULL,       -- 1: units are KV groups
  units       INTEGER NOT NULL,       -- units screened
  k           INTEGER NOT NULL,       -- the top k stated
  estimator   TEXT NOT NULL,          -- the ranking's: atp | importance | ig | ig-layer
  evaluated   INTEGER NOT NULL,       -- exact evaluations
  audits      INTEGER NOT NULL,       -- audit rounds (the last found none above threshold)
  population  INTEGER NOT NULL,       -- units unevaluated before the last audit (0: every unit was evaluated)
  audited     INTEGER NOT NULL,       -- units the last audit drew
  missed_max  INTEGER NOT NULL,       -- at most this many of the units left unevaluated lie above threshold ...
  confidence  REAL NOT NULL,          -- ... with this confidence (hypergeometric, exact); threshold: the k-th effect
  PRIMARY KEY(sweep_id, study)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS sweep_roles(
  sweep_id INTEGER NOT NULL REFERENCES sweeps(id),
  study    TEXT NOT NULL,             -- the roles study's name in the plan
  run_id   INTEGER NOT NULL REFERENCES role_runs(id),
  PRIMARY KEY(sweep_id, study)
) WITHOUT ROWID;
-- A gate training run of a gates study: a Hard Concrete gate on every query
-- head, its log alpha trained by Adam under an L0 penalty of weight lambda
-- with the weights frozen, on a training set apart from the held-out data.
-- Content-addressed like variants (the key digests model, training data,
-- metric, lambda, steps, lr, beta, init, seed, the study's name, which seeds
-- the noise, and the numeric version), so any sweep with the same ones reuses
-- it. Its state is saved as it trains: a killed run resumes at the step it
-- reached and ends as an uninterrupted one. Arrays are float64 (rng: uint64),
-- native byte order (little-endian on every platform headprune builds for).
CREATE TABLE IF NOT EXISTS gate_runs(
  id              INTEGER PRIMARY KEY,
  key             TEXT NOT NULL UNIQUE,
  model_id        INTEGER NOT NULL REFERENCES models(id),
  train_digest    TEXT NOT NULL,     -- the training set, digested as datasets.digest
  train_path      TEXT NOT NULL,
  train_seqs      INTEGER NOT NULL,
  metric          TEXT NOT NULL,     -- the objective's metric: loss | kl | cos (trained as 1 - cos)
  lambda          REAL NOT NULL,
  steps           INTEGER NOT NULL,  -- the Adam steps it trains for
  lr              REAL NOT NULL,
  beta            REAL NOT NULL,     -- the Hard Concrete temperature
  init            REAL NOT NULL,     -- every log alpha at step 0
  seed            TEXT NOT NULL,     -- the noise's seed, a decimal uint64
  n_layers        INTEGER NOT NULL,
  n_heads         INTEGER NOT NULL,
  step            INTEGER NOT NULL,  -- steps done (= steps when finished)
  objective       REAL,              -- the last step's: value + lambda * penalty; NULL before the first
  value           REAL,              -- its metric on the training set at the drawn gates
  penalty         REAL,              -- its expected number of open gates, sum of P(z != 0)
  log_alpha       BLOB NOT NULL,     -- (n_layers, n_heads)
  adam_m          BLOB NOT NULL,     -- (n_layers, n_heads) Adam's first moment
  adam_v          BLOB NOT NULL,     -- (n_layers, n_heads) and its second
  rng             BLOB NOT NULL,     -- the noise generator's state (4 uint64) after `step` steps
  n_kept          INTEGER,           -- finished: heads whose test-time gate is above 0; NULL while training
  wall_s          REAL NOT NULL,     -- seconds of training so far
  engine_version  TEXT NOT NULL,
  numeric_version INTEGER NOT NULL,
  host            TEXT NOT NULL,
  threads         INTEGER NOT NULL,  -- the threads of the last steps saved
  kernel          TEXT NOT NULL,
  created         TEXT NOT NULL,
  updated         TEXT NOT NULL
);

-- A finished gate run's gates, one row a query head.
CREATE TABLE IF NOT EXISTS gate_heads(
  run_id    INTEGER NOT NULL REFERENCES gate_runs(id),
  layer     INTEGER NOT NULL,
  head      INTEGER NOT NULL,
  label     TEXT NOT NULL,           -- '3.2'
  log_alpha REAL NOT NULL,
  gate      REAL NOT NULL,           -- the test-time gate; 0 = pruned
  PRIMARY KEY(run_id, layer, head)
) WITHOUT ROWID;

-- Each lambda of a sweep's gates studies and the finished run that trained it;
-- its curve points are the sweep_jobs of the study with step = idx (kind
-- 'gates': the pruned set; 'gates-frac': the model at the test-time gates).
CREATE TABLE IF NOT EXISTS sweep_gates(
  sweep_id INTEGER NOT NULL REFERENCES sweeps(id),
  study    TEXT NOT NULL,
  idx      INTEGER NOT NULL,         -- the lambda's place in the study's ascending list, from 0
  lambda   REAL NOT NULL,
  run_id   INTEGER NOT NULL REFERENCES gate_runs(id),
  PRIMARY KEY(sweep_id, study, idx)
);
