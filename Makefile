# The test command CI runs (through .ci/run) and README.md documents.
FUZZTIME ?= 10s

.PHONY: test vet race fuzz bench

test: vet race fuzz

vet:
	go vet ./...
	@test -z "$$(gofmt -l .)" || { echo "gofmt needed:"; gofmt -l .; exit 1; }

# go test hides the output of passing packages, so the loud line that says
# the PostgreSQL tests are skipping is printed here too.
PG ?= $(or $(IDEMGATE_TEST_POSTGRES),postgres://postgres@127.0.0.1:5432/test?sslmode=disable)
race:
	@pg_isready -q -d '$(PG)' 2>/dev/null || echo '*** PostgreSQL unreachable at $(PG): its tests SKIP (under CI=true they FAIL). Start it or set IDEMGATE_TEST_POSTGRES.'
	go test -race -count=1 ./...

# Short coverage-guided runs of the parsers on every CI run.
fuzz:
	go test -run '^$$' -fuzz '^FuzzCanonicalize$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 5s ./fingerprint
	go test -run '^$$' -fuzz '^FuzzParseKey$$' -fuzztime 5s -fuzzminimizetime 2s ./httpidem

# Benchmarks with the raw-SQL floor side by side (see README.md).
bench:
	go test -run '^$$' -bench . -benchtime 2000x -count 5 ./store/...
