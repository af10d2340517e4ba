//go:build linux && !race

package chaos

const raceEnabled = false
