package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/weavejobs/weave/internal/safetext"
)

// Untrusted text (group IDs, keys, job errors and results, names) reaches a terminal only through
// these helpers, which show it with internal/safetext: escape sequences and bidi or zero-width
// characters written visibly, never interpreted.

// maxCell bounds a text cell of a table or a detail; --full and --json have the whole text.
const maxCell = 120

// writeRow writes one row of a table (a tabwriter): each cell on one line, shown safely.
func writeRow(w io.Writer, cells ...string) {
	for i, c := range cells {
		cells[i] = safetext.Line(c)
	}
	fmt.Fprintln(w, strings.Join(cells, "\t"))
}

// cell shows long text in one cell: cut to maxCell bytes with a marker, unless full.
func cell(s string, full bool) string {
	if full {
		return safetext.Line(s)
	}
	return safetext.Clip(s, maxCell, "--full shows all")
}

// shown is s on one line, shown safely, for a message that quotes a name or an error.
func shown(s string) string { return safetext.Line(s) }
