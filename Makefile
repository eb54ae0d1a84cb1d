# The test command CI runs (through .ci/run) and README.md documents.
# Fuzz budgets are execution counts, not durations: a duration ends on a
# deadline that Go 1.26's fuzz coordinator can report as a failure
# (golang/go#75804, fixed in Go 1.27). These take a second or two each
# here, past the instrumented build: a short run on every CI run, with the
# seed corpora run by every go test too; a longer one is
# `make fuzz FUZZ_CANONICAL=2000000x …`.
FUZZ_CANONICAL ?= 20000x
FUZZ_FORM ?= 10000x
FUZZ_KEY ?= 10000x
FUZZ_CONTEXT ?= 2000x
FUZZ_EVENT ?= 20000x
FUZZ_CHECKPOINT ?= 10000x
FUZZ_SCENARIO ?= 3000x
FUZZ_WEBHOOK ?= 8000x
FUZZ_CLAIMS ?= 3000x
FUZZ_SUBJECT ?= 5000x
FUZZ_CONFIG ?= 4000x
FUZZ_KEYFROM ?= 6000x
FUZZ_LOCATION ?= 3000x
FUZZ_MCP_CALL ?= 4000x
FUZZ_MCP_SCHEMA ?= 4000x
FUZZ_MCP_SCENARIO ?= 2000x
FUZZ_MCP_KEY ?= 8000x
FUZZ_UPSTREAM_KEY ?= 6000x

.PHONY: test testbin setup lint vet race race-processes race-waiting processes fuzz bench bench-more python typescript integrations checks

# The modules beside the main one, each with its own go.mod (so that the
# main module links neither Temporal nor DBOS): their tests run a real
# idemgate built from this repository.
INTEGRATIONS := integrations/temporal integrations/dbos
# The runnable examples of those integrations: a module of their own too.
EXAMPLE_MODULES := examples/durable

# Three lanes at once: the in-process tests with -race (CPU-bound); the
# suites that mostly wait on processes, sockets and brokers (e2e's
# drills, the CLI's, the integration modules'), then the in-process ones
# that mostly wait (WAITING_PKGS), also with -race; and
# lint, the fuzz runs and the Python and TypeScript clients' tests, one
# after the other. Waiting lanes beside a busy one keep both cores busy:
# see docs/architecture.md, "Where make test spends its time". Each line is
# printed whole as it comes; the run fails if any lane does. Every suite
# that runs idemgate as a process (e2e's, the CLI's, the integration
# modules', the Python and TypeScript clients') runs testbin's, named by
# IDEMGATE_TEST_BINARY, instead of linking one of its own.
# GOGC=400 for every Go process the tests start (the test binaries, the
# idemgate they run, vet and staticcheck): they collect garbage a quarter
# as often, at some memory this machine has (24 GiB). In one pair of runs
# on an idle 2-core machine, make test took 238 s and 387 CPU-s with it,
# 253 s and 414 without. A GOGC set outside wins; make bench keeps Go's
# default, as a deployment has.
test: export GOGC := $(or $(GOGC),400)
test: setup testbin
	@IDEMGATE_TEST_BINARY='$(CURDIR)/bin/idemgate-test' $(MAKE) --no-print-directory -j3 -Oline race processes checks

# The idemgate the tests run, built once, without -race (a race-built
# server runs several times slower; its code's races are the in-process
# tests' to find).
testbin:
	go build -trimpath -o bin/idemgate-test ./cmd/idemgate

processes:
	@$(MAKE) --no-print-directory race-processes
	@$(MAKE) --no-print-directory integrations
	@$(MAKE) --no-print-directory race-waiting

checks:
	@$(MAKE) --no-print-directory lint
	@$(MAKE) --no-print-directory fuzz
	@$(MAKE) --no-print-directory python
	@$(MAKE) --no-print-directory typescript

# What the tests need, made ready where the machine allows (as root: start
# PostgreSQL and the brokers, install Chromium, npm ci the SDK projects);
# it says what it could not do, and under CI=true that fails the run.
setup:
	bash .ci/setup

# The habits the code keeps, checked rather than remembered: vet and gofmt,
# staticcheck (a tool dependency in go.mod, so its version is pinned and CI
# installs nothing), a go.mod that go mod tidy would not change, and the
# package layout of docs/design.md (internal/layout's test, which go test
# ./... also runs; here it runs on its own so lint alone can catch it; it
# also checks that the main module links no workflow engine). Each
# integration module gets the same: tidy, vet, and the main module's
# pinned staticcheck, built into bin/.
# -trimpath (through GOFLAGS, which staticcheck's go list obeys too), as
# the tests have: vet and staticcheck type-check this module from the
# build cache, which keys its packages by directory without it, so a
# fresh clone compiled them all again (lint took 59 s and 103 CPU-s in
# one, 10 s and 14 in a checkout that had run it).
lint vet: export GOFLAGS := $(strip $(GOFLAGS) -trimpath)
lint: vet
	go mod tidy -diff
	go tool staticcheck ./...
	go test -count=1 ./internal/layout
	go build -o bin/staticcheck honnef.co/go/tools/cmd/staticcheck
	@for m in $(INTEGRATIONS) $(EXAMPLE_MODULES); do echo "lint $$m"; (cd $$m && go mod tidy -diff && go vet ./... && ../../bin/staticcheck ./...) || exit 1; done

vet:
	go vet ./...
	@test -z "$$(gofmt -l .)" || { echo "gofmt needed:"; gofmt -l .; exit 1; }

# go test hides the output of passing packages, so the loud line that says
# the PostgreSQL tests are skipping is printed here too. A race-built
# binary sleeps a second before it exits (atexit_sleep_ms), for reports of
# goroutines still running; the tests start about a hundred of them (the
# CLI's, the drills'), and a race still fails its test and exits 66.
#
# RACEFLAGS: go vet is lint's (go test would run it again per package).
# The transpiled SQLite C (modernc.org/sqlite/lib) is not instrumented, as
# a cgo driver's C never is: it is third-party code, most of SQLite's CPU,
# and instrumenting it tripled every SQLite test's time. Its mutexes and
# atomics live in modernc.org/libc, which stays instrumented, so what one
# goroutine hands another through SQLite's locks is still seen ordered.
# -parallel 6 for the process suites only: their tests mostly wait on
# processes, sockets and brokers. The in-process ones keep one per core:
# at six, the server package's requests outlasted its 300ms upstream
# timeout on a loaded machine (504 upstream_timeout in two tests). -trimpath: the build
# cache then keys this module's packages by import path, not directory,
# so a fresh clone (CI's, in a new directory each run) reuses what the
# last run compiled instead of compiling every package again with -race.
PG ?= $(or $(IDEMGATE_TEST_POSTGRES),postgres://postgres@127.0.0.1:5432/test?sslmode=disable)
RACEFLAGS ?= -race -trimpath -count=1 -vet=off -gcflags='modernc.org/sqlite/lib=-race=false -d=checkptr=0'
# The packages whose tests run idemgate as processes (built without -race,
# once per package) and wait on them: the processes lane's.
PROCESS_PKGS := ./e2e ./cmd/idemgate
# In-process suites that mostly wait, on Chromium, on PostgreSQL, or for
# leases to run out (webui 40 CPU-s in 50 s alone, outbox 9 in 34,
# store/postgres 15 in 25): the processes lane runs them too, after its
# own, in the time it left idle, instead of lengthening the in-process
# lane, the longest one. With -race, one per core, as in-process tests.
WAITING_PKGS := ./webui ./outbox ./store/postgres
race:
	@pg_isready -q -d '$(PG)' 2>/dev/null || echo '*** PostgreSQL unreachable at $(PG): its tests SKIP (under CI=true they FAIL). Start it or set IDEMGATE_TEST_POSTGRES.'
	GORACE="$$GORACE atexit_sleep_ms=0" go test $(RACEFLAGS) $$(go list ./... | grep -v $(foreach p,$(PROCESS_PKGS) $(WAITING_PKGS),-e '/$(p:./%=%)$$'))

race-processes:
	GORACE="$$GORACE atexit_sleep_ms=0" go test $(RACEFLAGS) -parallel 6 $(PROCESS_PKGS)

race-waiting:
	GORACE="$$GORACE atexit_sleep_ms=0" go test $(RACEFLAGS) $(WAITING_PKGS)

# Each integration module's tests, with the race detector: their own go
# test, since ./... stops at a nested go.mod.
integrations:
	@pg_isready -q -d '$(PG)' 2>/dev/null || echo '*** PostgreSQL unreachable at $(PG): the integration modules PostgreSQL tests SKIP (under CI=true they FAIL).'
	@for m in $(INTEGRATIONS); do echo "test $$m"; (cd $$m && GORACE="$$GORACE atexit_sleep_ms=0" go test -race -trimpath -count=1 ./...) || exit 1; done

# The binary, in bin/, with its version (what idemgate mcp announces) from
# git: the tag, or the commit, "-dirty" for uncommitted changes.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
.PHONY: build
build:
	go build -ldflags "-X main.version=$(VERSION)" -o bin/idemgate ./cmd/idemgate

# The Python client: its type check (Debian's mypy, the settings in its
# pyproject.toml) and lint (pyflakes), then its tests (standard library
# only), which build idemgate once and run it (serve, and opsapi as the
# upstream), and fail rather than skip under CI=true when go is missing.
python:
	cd clients/python && mypy && pyflakes3 idemgate tests bench.py _build
	python3 -m unittest discover -s clients/python

# The TypeScript client's tests (clients/typescript, Node's own test
# runner): they build idemgate once and run it (serve, on SQLite and on a
# PostgreSQL schema of their own) with the real Vercel AI SDK, OpenAI
# Agents SDK and LangGraph that .ci/setup's npm ci installs; without go or
# node_modules they fail under CI=true rather than skip.
typescript:
	node clients/typescript/test/run.js

# Short coverage-guided runs of the parsers on every CI run: each target
# package's instrumented test binary is built once (-trimpath, as for the
# tests, so its packages come from the build cache across clones) and
# runs each of its targets from the package's directory, where a failing
# input is written (testdata/fuzz). Each run starts from the seed corpora
# alone, in a cache directory of its own (FUZZ_CACHE, by default a new
# one): the corpus Go keeps in GOCACHE grows with every run that finds
# something, and replaying it first made this lane slower each time (4 s
# of FuzzParseConfig's 5 were its 203 cached inputs). A long run that
# builds on earlier ones: make fuzz FUZZ_CANONICAL=2000000x …
# FUZZ_CACHE="$(go env GOCACHE)/fuzz".
FUZZ_CACHE ?=
FUZZ_TARGETS := \
	fingerprint:FuzzCanonicalize:$(FUZZ_CANONICAL) \
	fingerprint:FuzzParseForm:$(FUZZ_FORM) \
	contract:FuzzParseKey:$(FUZZ_KEY) \
	httpidem:FuzzRequestContext:$(FUZZ_CONTEXT) \
	audit:FuzzParseEvent:$(FUZZ_EVENT) \
	audit:FuzzParseCheckpoint:$(FUZZ_CHECKPOINT) \
	drill:FuzzParseScenario:$(FUZZ_SCENARIO) \
	inbox/webhook:FuzzStripeHeader:$(FUZZ_WEBHOOK) \
	inbox/webhook:FuzzGitHubHeader:$(FUZZ_WEBHOOK) \
	inbox/webhook:FuzzStandardHeaders:$(FUZZ_WEBHOOK) \
	config:FuzzCanonicalSubject:$(FUZZ_SUBJECT) \
	config:FuzzClaimMapping:$(FUZZ_CLAIMS) \
	config:FuzzParseConfig:$(FUZZ_CONFIG) \
	gateway:FuzzLocal:$(FUZZ_LOCATION) \
	inbox:FuzzKeyFrom:$(FUZZ_KEYFROM) \
	mcpproxy:FuzzReadCall:$(FUZZ_MCP_CALL) \
	mcpproxy:FuzzWithIntent:$(FUZZ_MCP_SCHEMA) \
	contract:FuzzMCPIntentKey:$(FUZZ_MCP_KEY) \
	ledger:FuzzUpstreamKey:$(FUZZ_UPSTREAM_KEY) \
	drill:FuzzParseMCPScenario:$(FUZZ_MCP_SCENARIO)
fuzz:
	@d=$$(mktemp -d) && trap 'rm -rf "$$d"' EXIT && cache=$${FUZZ_CACHE:-$$d/cache} && \
	for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; rest=$${t#*:}; f=$${rest%%:*}; n=$${rest#*:}; bin=$$d/$$(echo $$pkg | tr / _).test; \
		[ -x "$$bin" ] || go test -trimpath -c -fuzz=. -o "$$bin" ./$$pkg || exit 1; \
		echo "fuzz $$f ($$pkg, $$n)"; \
		(cd $$pkg && "$$bin" -test.run '^$$' -test.fuzz "^$$f\$$" -test.fuzztime $$n -test.fuzzminimizetime 1000x \
			-test.fuzzcachedir "$$cache/$$pkg/$$f") || exit 1; \
	done

# One command, one run, every surface against its floor on each store:
# the table is printed and written to $(BENCH_MD) (docs/performance.md has
# one run's). BENCH_FLAGS=-quick for a short smoke run.
BENCH_MD ?= bench.md
BENCH_FLAGS ?=
bench:
	go run ./cmd/bench -suite -n 3000 -md $(BENCH_MD) $(BENCH_FLAGS)

# The other benchmarks, each with its floor: the stores, the agent, the
# approval policy, the outbox, the reconciler, the webhooks, tracing.
bench-more:
	go test -run '^$$' -bench . -benchtime 2000x -count 5 ./store/...
	go test -run '^$$' -bench . -benchtime 1000x -count 5 ./agent
	go test -run '^$$' -bench . -benchtime 20000x -count 5 ./approval
	go test -run '^$$' -bench Retries -benchtime 3000x -count 5 ./httpidem
	go test -run '^$$' -bench 'ByHand|Relay' -benchtime 3000x -count 5 ./outbox
	go test -run '^$$' -bench Reconcile -benchtime 2000x -count 5 ./reconcile
	go test -run '^$$' -bench Verify -benchtime 20000x -count 5 ./inbox/webhook
	go run ./cmd/bench -traces -n 20000 -rounds 10 -c 32
	go test -run '^$$' -bench Tracing -benchtime 2000x -count 5 ./cmd/internal/server
	go test -run '^$$' -bench Consumer -benchtime 2000x -count 1 ./cmd/internal/server
