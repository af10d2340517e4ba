package dispatcher

// SetWaitHook sets a function each WaitSummary, WaitJob and WaitKey call calls once it waits on
// the shared subscription, having found nothing stored yet. Set it before the first such call.
func SetWaitHook(d *Dispatcher, f func()) { d.waitHook = f }

// SkipRunningCheck makes Publish skip its check for a sealed running incarnation, for tests that
// stand in for a coordinator which accepted a second incarnation.
func SkipRunningCheck(d *Dispatcher) { d.skipRunningCheck = true }

// ReplyToken returns the Dispatcher's reply token, for tests that stand in for the coordinator
// publishing a group's outcomes to the producer that opened it.
func ReplyToken(d *Dispatcher) string { return d.reply }
