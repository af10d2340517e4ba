// Package coordinator is Weave's coordinator: it admits groups from the JOBS stream, releases
// their jobs to pools of workers, applies the workers' reports, and writes each job's outcome and
// each complete group's summary. One coordinator is active per namespace (it holds the lease);
// others wait as standbys.
//
// Inside, the engine (package internal/engine, which does no I/O) holds the state and makes the
// decisions; a run (run.go, loop.go, replayread.go, pipelines.go) does the I/O for one term:
// it feeds the engine the streams' messages and carries out the effects it returns, values and
// IDs only. One goroutine, the loop, owns the engine. ARCHITECTURE.md ("Inside the coordinator") follows
// one job through these files and has the glossary of the words used here.
package coordinator
