package integration_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/internal/testwait"
)

// TestStatusOfALargeNamespace: a namespace whose status would not fit in the server's max
// payload (here 6,000 resources, one per pending job, against the default 1 MiB) still
// answers, its resource list cut to fit and its count whole. Before, the answer was refused by
// the server ("maximum payload exceeded") and every status request timed out.
func TestStatusOfALargeNamespace(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.coordinator(coordinator.Config{})
	const n = 6000
	e.publish("many-resources", func(yield func(dispatcher.Job) bool) {
		for i := range n {
			// Required by one job each and held by no worker: they stay pending.
			if !yield(dispatcher.Job{Key: fmt.Sprint("k", i), Require: []string{fmt.Sprintf("customer-%05d", i)}}) {
				return
			}
		}
	})
	var st *coordinator.Status
	testwait.For(t, 30*time.Second, "the status to count every resource", func() bool {
		var err error
		st, err = coordinator.QueryStatus(e.ctx, e.nc, e.ns)
		if err != nil {
			t.Fatalf("status of a namespace of %d resources: %v", n, err)
		}
		return st.ResourceCount == n
	})
	if !st.Cut || len(st.Resources) == 0 || len(st.Resources) >= n || st.Resources[0].Name != "customer-00000" {
		t.Fatalf("cut %v, %d of %d resources listed, first %+v", st.Cut, len(st.Resources), st.ResourceCount, st.Resources[:min(1, len(st.Resources))])
	}
	if st.Jobs["pending"] != n || st.OpenGroups != 1 {
		t.Fatalf("%d jobs pending, %d open groups; want %d and 1", st.Jobs["pending"], st.OpenGroups, n)
	}
}
