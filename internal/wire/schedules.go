package wire

import "strings"

// SchedulesStream is the stream of the namespace's schedules (internal/schedule): per schedule,
// its definition on NS.schedule.def.<name> and the last tick fired on NS.schedule.fired.<name>,
// the stream keeping the latest message of each subject.
func (n Names) SchedulesStream() string { return n.ns + "_SCHEDULES" }

// AllSchedules is the subject filter of the schedules stream.
func (n Names) AllSchedules() string { return n.ns + ".schedule.>" }

// ScheduleSubject is the subject of a schedule's definition (the name is a subject token).
func (n Names) ScheduleSubject(name string) string { return n.ns + ".schedule.def." + name }

// AllScheduleDefs is the subject filter of every schedule's definition: producers may publish on it.
func (n Names) AllScheduleDefs() string { return n.ns + ".schedule.def.*" }

// FiredSubject is the subject of the record of a schedule's last tick fired.
func (n Names) FiredSubject(name string) string { return n.ns + ".schedule.fired." + name }

// AllFired is the subject filter of every schedule's fired record: the coordinator's.
func (n Names) AllFired() string { return n.ns + ".schedule.fired.*" }

// ParseScheduleSubject returns whether subject is a definition's (def) or a fired record's, and
// the schedule's name.
func (n Names) ParseScheduleSubject(subject string) (def bool, name string, ok bool) {
	if name, ok = strings.CutPrefix(subject, n.ns+".schedule.def."); ok {
		return true, name, name != "" && !strings.Contains(name, ".")
	}
	if name, ok = strings.CutPrefix(subject, n.ns+".schedule.fired."); ok {
		return false, name, name != "" && !strings.Contains(name, ".")
	}
	return false, "", false
}
