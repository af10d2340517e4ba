//go:build !race

package jobindex

const raceEnabled = false
