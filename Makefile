# The test command CI runs (through .ci/run) and README.md documents.
FUZZTIME ?= 10s

.PHONY: test vet race fuzz bench

test: vet race fuzz

vet:
	go vet ./...
	@test -z "$$(gofmt -l .)" || { echo "gofmt needed:"; gofmt -l .; exit 1; }

race:
	go test -race -count=1 ./...

# A short coverage-guided run of the canonicalizer on every CI run.
fuzz:
	go test -run '^$$' -fuzz '^FuzzCanonicalize$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 5s ./fingerprint

# Benchmarks with the raw-SQL floor side by side (see README.md).
bench:
	go test -run '^$$' -bench . -benchtime 2000x -count 5 ./store/...
