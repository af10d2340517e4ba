package dashboard

import (
	"strings"
	"testing"
)

// TestDecodeStatus: alarms and standbys are read from the status JSON when present, and a shape
// the dashboard does not expect leaves them empty without hiding the rest.
func TestDecodeStatus(t *testing.T) {
	st, err := decodeStatus([]byte(`{"namespace":"n","epoch":3,"jobs":{"pending":2},
		"alarms":[{"name":"pending_growth","raised_at":"2026-01-02T03:04:05Z","message":"add capacity","values":{"rate_in":12.5,"slots":4}}],
		"standbys":[{"id":"c2"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if st.Epoch != 3 || st.Jobs["pending"] != 2 || len(st.Alarms) != 1 || st.Alarms[0].Name != "pending_growth" ||
		st.Alarms[0].Values["rate_in"] != 12.5 || st.Alarms[0].RaisedAt.IsZero() || string(st.Standbys) != `[{"id":"c2"}]` {
		t.Errorf("decoded %+v", st)
	}
	st, err = decodeStatus([]byte(`{"namespace":"n","epoch":4,"alarms":"not a list"}`))
	if err != nil || st.Epoch != 4 || st.Alarms != nil || !strings.Contains(string(st.Raw), "not a list") {
		t.Errorf("with an unexpected alarms field: %+v %v", st, err)
	}
	if _, err := decodeStatus([]byte(`{"epoch":"x"}`)); err == nil {
		t.Error("a status that does not decode: no error")
	}
}
