package dashboard

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"

	"github.com/weavejobs/weave/internal/safetext"
)

// bootMark is where index.html receives the boot data.
var bootMark = []byte("</head>")

// splitPage reads index.html and splits it where the boot data goes.
func splitPage(assets fs.FS) ([2][]byte, error) {
	b, err := fs.ReadFile(assets, "index.html")
	if err != nil {
		return [2][]byte{}, err
	}
	i := bytes.Index(b, bootMark)
	if i < 0 {
		return [2][]byte{}, errors.New("dashboard: index.html has no </head>")
	}
	return [2][]byte{b[:i], b[i:]}, nil
}

// index serves the page with its configuration and the latest snapshot in it (a JSON data
// block, which no policy counts as script), so that it renders at once, before its event
// stream opens, and a screenshot of the page as loaded shows the namespace.
func (s *Server) index(w http.ResponseWriter, _ *http.Request) {
	cfg, _ := json.Marshal(s.pageConfig())
	snap, _ := s.current()
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	var b bytes.Buffer
	b.Write(s.page[0])
	// encoding/json writes <, > and & as \u escapes, so the data cannot close the element.
	fmt.Fprintf(&b, "<script type=\"application/json\" id=\"boot\">{\"config\":%s,\"snapshot\":%s}</script>\n", cfg, snap)
	b.Write(s.page[1])
	_, _ = w.Write(b.Bytes())
}

// safeJSON returns the JSON value raw with every string in it, keys included, shown safely
// (safetext.Line): the status quotes group IDs, names and messages that producers and workers
// chose.
func safeJSON(raw []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return json.Marshal(safeValue(v))
}

func safeValue(v any) any {
	switch v := v.(type) {
	case string:
		return safetext.Line(v)
	case []any:
		for i, e := range v {
			v[i] = safeValue(e)
		}
		return v
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[safetext.Line(k)] = safeValue(e)
		}
		return out
	}
	return v
}
