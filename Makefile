# hyp: two commands on a fresh machine.
#   make run   builds and runs the daemon on the embedded default config
#   make test  runs every test
GO       ?= go
BIN      := bin/hyp
HYP_HOME ?= $(HOME)/.hyp
export CGO_ENABLED := 1

.PHONY: build run test fuzz clean

build:
	$(GO) build -o $(BIN) ./cmd/hyp

run: build
	./$(BIN) daemon --home $(HYP_HOME)

# The first run downloads modules (DuckDB's static library is ~130 MB) and compiles them.
test:
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 15m ./...

# Longer fuzzing than the seed corpus `make test` runs.
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzObject -fuzztime 60s ./internal/jsonrow
	$(GO) test -run '^$$' -fuzz FuzzDecodeLogs -fuzztime 60s ./internal/otlp

clean:
	rm -rf bin
