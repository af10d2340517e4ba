package dispatcher

// SetWaitHook sets a function each WaitSummary, WaitJob and WaitKey call calls once it waits on
// the shared subscription, having found nothing stored yet. Set it before the first such call.
func SetWaitHook(d *Dispatcher, f func()) { d.waitHook = f }
