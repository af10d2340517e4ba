package jstest

import (
	"fmt"
	"sync"

	"github.com/rs/zerolog"
)

// serverLogger passes a nats-server's log to a zerolog.Logger. It also keeps the first
// fatal message: an embedded server that cannot start (a port in use, a bad store) reports
// it through Fatalf and carries on half started, so this is how start fails fast.
type serverLogger struct {
	log zerolog.Logger

	mu       sync.Mutex
	fatalErr error
}

func (l *serverLogger) Noticef(format string, v ...any) { l.log.Info().Msgf(format, v...) }
func (l *serverLogger) Warnf(format string, v ...any)   { l.log.Warn().Msgf(format, v...) }
func (l *serverLogger) Errorf(format string, v ...any)  { l.log.Error().Msgf(format, v...) }
func (l *serverLogger) Debugf(format string, v ...any)  { l.log.Debug().Msgf(format, v...) }
func (l *serverLogger) Tracef(format string, v ...any)  { l.log.Trace().Msgf(format, v...) }

// Fatalf records the error and logs it at fatal level without exiting the process.
func (l *serverLogger) Fatalf(format string, v ...any) {
	l.mu.Lock()
	if l.fatalErr == nil {
		l.fatalErr = fmt.Errorf(format, v...)
	}
	l.mu.Unlock()
	l.log.WithLevel(zerolog.FatalLevel).Msgf(format, v...)
}

// fatal returns the first fatal error the server reported, or nil.
func (l *serverLogger) fatal() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fatalErr
}
