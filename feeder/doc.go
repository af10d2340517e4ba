// Package feeder implements the feeder of Weave's scheduling model.
//
// # The model
//
// Jobs come in groups. A feeder holds one group at a time. The moment its group
// runs dry, it takes the next group from a source it shares with the other
// feeders, skipping empty groups. A feeder that finds the source empty is
// finished. Because every feeder takes from the same source, groups are handed
// out in source order to whichever feeder runs dry first.
//
// With two feeders and the groups [x1 x2] [y1 y2 y3] [z1], the first feeder
// holds x and the second holds y. When x runs dry, the first feeder takes z
// while the second is still on y. Taking one job from each feeder in turn gives
// x1 y1 x2 y2 z1 y3. That interleaving is [github.com/weavejobs/weave/spreader.Spread].
//
// # Two forms
//
// Groups given as iterators use [Source] and [Feeder]. A Source pulls groups
// from an iter.Seq[iter.Seq[T]] one at a time, only when a feeder needs one.
// [Feed] is one feeder's jobs in push form, and a Feeder is the same jobs in
// pull form. Nothing is read ahead, so both work on endless sources.
//
// Groups that arrive over time, as in the coordinator's live scheduler, are keys
// kept in a [Queue]. One Queue holds the groups waiting for a feeder, and each
// group's pushed jobs wait in a Queue of their own. A Queue releases memory as
// it drains, so a long-lived scheduler does not hold on to the largest backlog
// it has ever seen.
//
// None of the types here is safe for concurrent use.
package feeder
