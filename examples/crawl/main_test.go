package main

import (
	"context"
	"os"
	"testing"

	"github.com/weavejobs/weave/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// The chain's output is deterministic: the index runs once every crawl group has succeeded, and
// sees all of their pages.
func Example_crawl() {
	if err := run(context.Background(), os.Stdout); err != nil {
		panic(err)
	}
	// Output:
	// index: done: indexed 19 pages of 6 sites
	// report: done: report sent
}
