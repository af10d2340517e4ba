package dispatcher

// SetWaitHook sets a function each WaitSummary calls once it waits on the shared subscription,
// having found no stored summary. Set it before the first WaitSummary.
func SetWaitHook(d *Dispatcher, f func()) { d.waitHook = f }
