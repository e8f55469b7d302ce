// Command s3-server serves the S3 API on a loopback address for the
// backup tests: gofakes3 (an S3-compatible server library) with its
// in-memory backend, plus flags to listen and to create buckets. No
// project logic lives here.
package main

import (
	"flag"
	"log"
	"net/http"
	"strings"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:9000", "listen address")
	buckets := flag.String("buckets", "", "comma-separated buckets to create at start")
	flag.Parse()

	backend := s3mem.New()
	for _, bucket := range strings.Split(*buckets, ",") {
		if bucket = strings.TrimSpace(bucket); bucket != "" {
			if err := backend.CreateBucket(bucket); err != nil {
				log.Fatalf("create bucket %s: %v", bucket, err)
			}
		}
	}
	faker := gofakes3.New(backend, gofakes3.WithAutoBucket(false))
	log.Printf("s3-server listening on %s", *addr)
	log.Fatal(http.ListenAndServe(*addr, faker.Server()))
}
