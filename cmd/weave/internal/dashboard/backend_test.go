package dashboard

import (
	"strings"
	"testing"
)

// TestDecodeStatus: the status is decoded with its alarms and standby coordinators, and kept as
// it came (the page gets the JSON as sent); one that does not decode is an error.
func TestDecodeStatus(t *testing.T) {
	data := []byte(`{"namespace":"n","epoch":3,"jobs":{"pending":2},
		"alarms":[{"name":"pending_growth","raised_at":"2026-01-02T03:04:05Z","message":"add capacity","values":{"rate_in":12.5,"slots":4}}],
		"standbys":[{"holder":"host/42"}],"later":"a field the dashboard does not know"}`)
	st, err := decodeStatus(data)
	if err != nil {
		t.Fatal(err)
	}
	if st.Epoch != 3 || st.Jobs["pending"] != 2 || len(st.Alarms) != 1 || st.Alarms[0].Name != "pending_growth" ||
		st.Alarms[0].Values["rate_in"] != 12.5 || st.Alarms[0].RaisedAt.IsZero() || len(st.Standbys) != 1 || st.Standbys[0].Holder != "host/42" ||
		!strings.Contains(string(st.Raw), "a field the dashboard does not know") {
		t.Errorf("decoded %+v", st)
	}
	if _, err := decodeStatus([]byte(`{"epoch":"x"}`)); err == nil {
		t.Error("a status that does not decode: no error")
	}
}
