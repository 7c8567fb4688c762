# Every target installs what is missing first; nothing global is needed beyond Node 20 and npm.
SHELL := /bin/bash
export PORT ?= 8080
export DATA_DIR ?= ./data
# Every DuckDB statement and file operation holds a libuv threadpool thread while it runs (4 by
# default): room for the API's lanes, capture, the export slots and file I/O at once.
export UV_THREADPOOL_SIZE ?= 16
TSX := node --import tsx
# The checks remember what they found unchanged (under node_modules/.cache, which a clean removes):
# a second `make test` checks in ~2 s instead of ~8 s. Prettier's cache compares contents, not file
# times, which a checkout or a build tool may change without changing the file.
PRETTIER_CACHE := --cache --cache-strategy content --cache-location node_modules/.cache/prettier/.prettier-cache
TSC_CACHE := --incremental --tsBuildInfoFile node_modules/.cache/tsc/tsconfig.tsbuildinfo
# Each client socket is a file descriptor shared with the spool and the lake: the soft limit is
# raised to the hard one where the system allows (the API caps its sockets below what it leaves).
RAISE_FDS := ulimit -n "$$(ulimit -Hn)" 2>/dev/null || true;

.PHONY: run test format install capture standin api fill seal compact serving-copies replay-copies migrate migrate-timestamps client-ts backfill query replay bench-replay key keys revoke download bench-capture bench-api bench-overload bench-compare bench-recent bench-export bench-hostile bench-trades bench-reference bench-venuetext bench-disk bench bench-profile bench-fairness bench-fairness-run bench-bucket bench-recorders audit-recorders-faults mirror-bucket merge rgw-start rgw-stop typecheck clean

node_modules/.installed: package.json package-lock.json
	npm install --no-audit --no-fund
	touch $@

install: node_modules/.installed

# tap builds its Test class for the plugins in .taprc on first use, but the run that builds it still
# spawns its test files with the plugins it started with (ts-node: a fresh clone's first suite
# took ~45 s more than its second). So it is built beforehand, and again when the plugins change.
node_modules/.tap-built: node_modules/.installed .taprc $(wildcard tools/tap-esbuild/*)
	npx tap build
	touch $@

## make run: fill an empty lake from the local stand-in, then keep capturing from it.
run: install
	$(TSX) jobs/fill.ts
	$(RAISE_FDS) $(TSX) jobs/run.ts

## make test: the whole suite (typecheck, then tap; from Debian: chromium for the explorer's browser test, Ceph's RADOS Gateway for the bucket's).
# Prettier and the typecheck at once (one core each; see PRETTIER_CACHE), then the suite.
test: install node_modules/.tap-built
	bash scripts/ensure-chromium.sh
	bash scripts/rgw.sh install
	npx prettier --check . --log-level warn $(PRETTIER_CACHE) & prettier=$$!; npx tsc --noEmit -p . $(TSC_CACHE); typecheck=$$?; wait $$prettier && exit $$typecheck
	# Then, in a slot of their own, one at a time (see .taprc; coverage is the first run's); both run
	# whatever the first found, so one run shows every failure, listed again at the end (scripts/failures.sh).
	# The solo runs record until the hour their last kill ended in is due: beside stress-ng up to three
	# simulated hours, 18-20 min real each (.taprc's bound is the parallel run's). No comment may sit
	# inside the continued lines below: it would end the shell line there.
	npx tap --jobs=$$(node -p 'Math.max(2, 2 * os.availableParallelism())'); suite=$$?; \
	failed=$$(bash scripts/failures.sh); \
	npx tap --disable-coverage --jobs=1 --timeout=1800 test/*.solo.ts; solo=$$?; \
	echo "$$failed"; bash scripts/failures.sh solo; \
	test $$suite -eq 0 -a $$solo -eq 0

## make format: Prettier over the code (make test checks it)
format: install
	npx prettier --write . --log-level warn

capture: install
	$(RAISE_FDS) $(TSX) jobs/capture.ts

standin: install
	$(TSX) jobs/standin.ts

api: install
	$(RAISE_FDS) $(TSX) jobs/api.ts

## make key PLAN=paid LABEL=me: prints a new key alone on its last line
key: install
	@$(TSX) jobs/keys.ts issue "$(PLAN)" "$(LABEL)"

keys: install
	@$(TSX) jobs/keys.ts list

revoke: install
	@$(TSX) jobs/keys.ts revoke "$(KEY_ID)"

fill: install
	$(TSX) jobs/fill.ts

seal: install
	$(TSX) jobs/seal.ts $(if $(ALL),--all,)

compact: install
	$(TSX) jobs/compact.ts

## make replay-copies: the replay copy of every finished market that lacks one, newest first, within COPIES_SHARE (idempotent)
replay-copies: install
	$(TSX) jobs/replay-copies.ts

## make serving-copies: the pages' serving copies a lake lacks written, those of replaced files removed (idempotent)
serving-copies: install
	$(TSX) jobs/serving-copies.ts

## make client-ts: regenerate the TypeScript client's types from the route table's OpenAPI document
client-ts: install
	$(TSX) jobs/client-ts.ts

## make migrate: rewrite files in an older form (naive times before 2026-11-23, books without verified_by before 2026-11-26; idempotent)
migrate migrate-timestamps: install
	$(TSX) jobs/migrate.ts

## make backfill VENUE=wallet-prediction COIN=btc WINDOW=15m FROM=2026-05-05 TO=2026-05-12
backfill: install
	$(TSX) jobs/backfill.ts --venue "$(VENUE)" --coin "$(COIN)" --window "$(WINDOW)" --from "$(FROM)" --to "$(TO)" $(if $(filter live,$(UPSTREAM)),,--standin)

## make mirror-bucket: the whole lake into the bucket S3_BUCKET names (S3_ENDPOINT, S3_ACCESS_KEY_ID, ...); idempotent
mirror-bucket: install
	$(TSX) jobs/mirror-bucket.ts

## make merge: merges the recorders' lakes under the bucket's _recorders/ into its record, every MERGE_MS (captures with RECORDER_ID do it too)
merge: install
	$(TSX) jobs/merge.ts

## make rgw-start / rgw-stop: a local S3 server (Ceph's RADOS Gateway, single node, from Debian's packages; root installs them)
export RGW_DIR ?= ./.rgw
export RGW_PORT ?= 7480
rgw-start:
	bash scripts/rgw.sh install
	bash scripts/rgw.sh start "$(RGW_DIR)" "$(RGW_PORT)" > "$(RGW_DIR).env"
	@echo "S3 on http://127.0.0.1:$(RGW_PORT); its settings are in $(RGW_DIR).env (source it, then set S3_BUCKET)"

rgw-stop:
	bash scripts/rgw.sh stop "$(RGW_DIR)"
	rm -f "$(RGW_DIR).env"

## make download DATASET=books COIN=btc WINDOW=15m FROM=2026-07-26 TO=2026-07-27 DEST=./mirror (key in PMH_API_KEY)
download: install
	$(TSX) jobs/download.ts --ns "$(or $(NS),wallet-prediction)" --dataset "$(DATASET)" --coin "$(COIN)" --window "$(WINDOW)" --from "$(FROM)" --to "$(TO)" --dest "$(DEST)"

query: install
	$(TSX) jobs/query.ts

## make replay VENUE=polymarket FROM=2026-07-26T12:00:00Z TO=2026-07-26T12:15:00Z COIN=btc WINDOW=5m OUT=replay.ndjson (or MARKETS=id,id; SPEED=max)
replay: install
	@$(TSX) jobs/replay.ts --venue "$(or $(VENUE),polymarket)" --from "$(FROM)" --to "$(TO)" --speed "$(or $(SPEED),max)" --markets "$(MARKETS)" --coin "$(COIN)" --window "$(WINDOW)" --out "$(OUT)"

bench-capture: install
	$(TSX) bench/capture.ts
	$(TSX) bench/stream.ts
	$(TSX) bench/seal.ts

## make bench-api: builds a 1-day and a 90-day lake (about 11 GB in $$TMPDIR, about 20 min; BENCH_ROOT=dir keeps them), then loads the API in fresh processes
bench-api: install
	$(TSX) bench/api.ts

## make bench-overload: only the overload section of bench-api, on the 1-day lake (about a minute)
bench-overload: install
	BENCH_DAYS=1 BENCH_OVERLOAD_ONLY=1 $(TSX) bench/api.ts

## make bench-compare: the same rows in the lake and in PostgreSQL 15 (installed from Debian if missing), served side by side, driven by wrk
bench-compare: install
	$(TSX) bench/compare.ts

## make bench-recent: pages of the newest hour's markets (rows still in the spool) against PostgreSQL, followed in memory and by SQL (a few minutes)
bench-recent: install
	$(TSX) bench/recent.ts

## make bench-profile: where a cold page's time goes on the SQL path (book cache off), from a CPU profile of the API
bench-profile: install
	$(TSX) bench/profile.ts

## make bench-replay: the WebSocket replay, both venues, from a recorded lake (a sealed hour and markets ended a minute before): messages/s, time to the first message, copies missed/hit and tapes cached, memory per replay
bench-replay: install
	$(TSX) bench/replay.ts

## make bench-bucket: page latency served from a bucket (Ceph's RADOS Gateway here), cache cold and warm, against the local-disk lake
bench-bucket: install
	$(TSX) bench/bucket.ts

## make audit-recorders-faults: two recorders killed in turn with the stand-in's stream faults on, the merged record audited (issue 49's faults-on run; make test runs it too, in its solo slot)
audit-recorders-faults: install node_modules/.tap-built
	bash scripts/rgw.sh install
	npx tap --disable-coverage --timeout=1800 test/recorders-faults.solo.ts

## make bench-recorders: what a second recorder costs: bucket objects and bytes per prefix, requests an hour, the merge's time per sealed hour, when a merged hour is served
bench-recorders: install
	$(TSX) bench/recorders.ts

## make bench-fairness: 64 paid keys within their rates against `make api`'s default admission, a bystander key's latency beside them
bench-fairness: install
	$(TSX) bench/fairness.ts

## make bench-fairness-run: the same bystander through `make run` as a user starts it (24 keys pushing, capture recording)
bench-fairness-run: install
	$(TSX) bench/fairness-run.ts

bench-export: install
	$(TSX) bench/export.ts

## make bench-hostile: 20,000 idle sockets against `make run` while a client reads and capture records (about 2 minutes)
bench-hostile: install
	$(TSX) bench/hostile.ts

## make bench-trades: a million trades spooled and sealed as capture does (seconds)
bench-trades: install
	$(TSX) bench/trades.ts

## make bench-reference: capture's reference-price socket against the stand-in, a simulated hour (about a minute)
bench-reference: install
	$(TSX) bench/reference.ts

## make bench-disk: bytes per book row of a day of `make run`'s capture (both venues' feeds, 24 simulated hours at 20x, about 75 min; BENCH_DISK_HOURS, BENCH_DISK_SPEED): Parquet, serving and replay copies, PostgreSQL
bench-disk: install
	$(TSX) bench/disk.ts

## make bench-venuetext: bytes per row of the venue's text and hash columns on a `make run` lake
bench-venuetext: install
	$(TSX) bench/venuetext.ts

## make bench: every benchmark above, one after the other (hours: bench-api alone builds an 11 GB lake); each writes its section of BENCHMARKS.md
bench: bench-capture bench-api bench-overload bench-compare bench-recent bench-profile bench-replay bench-bucket bench-recorders bench-fairness bench-fairness-run bench-export bench-hostile bench-trades bench-reference bench-venuetext bench-disk

typecheck: install
	npx tsc --noEmit -p . $(TSC_CACHE)

clean:
	rm -rf node_modules .tap coverage
