// Package wire defines Weave's wire protocol, version 1, in one place: stream, subject and
// consumer names, message headers, and the binary codecs for work batches, report batches and
// group outcomes.
//
// Every other package builds names and messages through this package, so the protocol described
// in ARCHITECTURE.md ("Streams and subjects") is exactly what this code does. Decoders take
// untrusted bytes: they check every length against the remaining input before allocating and
// return an error wrapping ErrMalformed, never panic (see the fuzz tests).
package wire
