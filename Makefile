.DEFAULT_GOAL := help

.PHONY: help
help: ## Show this help
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  %-12s %s\n", $$1, $$2}'

.PHONY: demo
demo: ## Run the demo on an embedded NATS server
	go run ./cmd/weave demo

.PHONY: test
test: ## Run the tests (the README's test command)
	go test ./...

.PHONY: race
race: ## Run the tests with the race detector
	go test -race -count=1 ./...

.PHONY: vet
vet: ## go vet, staticcheck (pinned, staticcheck.conf) and gofmt check
	go vet ./...
	go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)

.PHONY: bench
bench: ## Run all benchmarks (several minutes)
	go test -run='^$$' -bench=. -benchtime=3x ./...

.PHONY: fuzz
fuzz: ## Fuzz every decoder of untrusted bytes for 30s each
	go test -run='^$$' -fuzz=FuzzDecodeWork -fuzztime=30s ./internal/wire/
	go test -run='^$$' -fuzz=FuzzDecodeReports -fuzztime=30s ./internal/wire/
	go test -run='^$$' -fuzz=FuzzDecodeOutcomeMsg -fuzztime=30s ./internal/wire/
	go test -run='^$$' -fuzz=FuzzDecodeCancel -fuzztime=30s ./internal/wire/
	go test -run='^$$' -fuzz=FuzzParseHeaders -fuzztime=30s ./internal/wire/
	go test -run='^$$' -fuzz=FuzzParsePack -fuzztime=30s ./internal/wire/
	go test -run='^$$' -fuzz=FuzzParseSinglePack -fuzztime=30s ./internal/wire/
	go test -run='^$$' -fuzz=FuzzParseAck -fuzztime=30s ./internal/asyncpub/
	go test -run='^$$' -fuzz=FuzzDecode -fuzztime=30s ./internal/journal/
	go test -run='^$$' -fuzz=FuzzRestore -fuzztime=30s ./internal/jobindex/
	go test -run='^$$' -fuzz=FuzzTransitions -fuzztime=30s ./internal/jobindex/
	go test -run='^$$' -fuzz=FuzzParseJobLine -fuzztime=30s ./cmd/weave/

.PHONY: chaos
chaos: ## Fault injection, long form: ~72,000 jobs on a 3-node cluster under 40 faults (several minutes)
	WEAVE_CHAOS=long go test -count=1 -timeout 40m -run '^TestChaos$$' -v ./integration/chaos/

.PHONY: chaos-load
chaos-load: ## Fault injection, short form, 5 runs with other test packages loading the cores beside it
	integration/chaos/scripts/under-load.sh 5

.PHONY: screenshots
screenshots: ## Regenerate docs/dashboard-*.png in headless Chromium
	go test -count=1 -run '^TestDashboardScreenshots$$' ./cmd/weave/internal/dashboard/ -update-screenshots

.PHONY: ci
ci: ## What CI runs
	.ci/run
