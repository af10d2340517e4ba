// Package engine is the coordinator's state machine: it admits groups, schedules their jobs
// over the fleet, applies reports, retries, delays, limits, affinity, retention and the
// decisions of replay. It does no I/O and imports no NATS client (a test holds it to that):
// the coordinator's run reads the streams and feeds the engine their messages (Feed, Report,
// Heartbeat, SetLimit, ...) and the clock (Tick), asks it to decide (ReleaseAll), and carries out
// what it decided (TakeEffects: releases, writes, rejections, answers, as values and IDs only).
// Replay feeds it the streams the same way before EndReplay.
//
// One goroutine, the run's loop, owns an Engine; nothing in it is shared. Its parts each own one
// kind of state: groups (groups.go, grouptable.go), the fleet (fleet.go), the release decision
// (release.go), reports (reports.go), retries (retries.go), delays (delays.go), limits
// (limits.go), dependencies (after.go), redrives (redrive.go), retention (retention.go), the
// writes of outcomes (writes.go), and replay until it ends (replaystate.go).
package engine
