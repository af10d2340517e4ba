package jstest_test

import (
	"context"
	"fmt"
	"log"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weavejobs/weave/integration/jstest"
)

// A single server for a program such as `weave demo`: Start waits until JetStream is ready.
func Example() {
	ctx := context.Background()
	srv, err := jstest.Start(ctx, jstest.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Shutdown()

	nc, err := srv.ConnectInProcess()
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := js.Publish(ctx, "orders.new", []byte("hello")); err != nil {
		log.Fatal(err)
	}
	msg, err := stream.GetMsg(ctx, 1)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(msg.Subject, string(msg.Data))
	// Output: orders.new hello
}

// A three-node cluster with a replicated stream.
func ExampleStartCluster() {
	ctx := context.Background()
	c, err := jstest.StartCluster(ctx, 3, jstest.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Shutdown()

	nc, err := c.Connect()
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}, Replicas: 3})
	if err != nil {
		log.Fatal(err)
	}
	// Creating the stream elected a leader; wait for the followers to catch up too.
	if err := c.WaitStreamReady(ctx, "ORDERS"); err != nil {
		log.Fatal(err)
	}
	fmt.Println("leader elected:", c.StreamLeader("ORDERS") != nil)
	// Output: leader elected: true
}
