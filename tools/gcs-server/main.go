// Command gcs-server serves Google Cloud Storage on a loopback address for
// the backup tests: fake-gcs-server's fakestorage (objects in memory) with
// flags to listen and to create buckets.
//
// fake-gcs-server serves the XML API's reads (GET and HEAD of an object,
// the list-type=2 bucket listing) and deletes, but not its writes: a plain
// XML PUT is refused ("invalid uploadType") and XML multipart uploads are
// not implemented (upstream issue 852). The operator's GCS client (the
// object_store crate) writes only through the XML API, so xmlwrites.go adds
// those requests on top, storing every object through fakestorage. No
// project logic lives here.
package main

import (
	"flag"
	"log"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/fsouza/fake-gcs-server/fakestorage"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:4443", "listen address (host:port)")
	buckets := flag.String("buckets", "", "comma-separated buckets to create at start")
	flag.Parse()

	host, portText, err := net.SplitHostPort(*addr)
	if err != nil {
		log.Fatalf("address %s: %v", *addr, err)
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil {
		log.Fatalf("port %s: %v", portText, err)
	}
	server, err := fakestorage.NewServerWithOptions(fakestorage.Options{
		Scheme:     "http",
		Host:       host,
		Port:       uint16(port),
		NoListener: true,
		// Path-style XML requests (http://addr/bucket/object) are routed
		// only when the Host header is the public host.
		PublicHost: *addr,
	})
	if err != nil {
		log.Fatalf("fake-gcs-server: %v", err)
	}
	for _, bucket := range strings.Split(*buckets, ",") {
		if bucket = strings.TrimSpace(bucket); bucket != "" {
			server.CreateBucketWithOpts(fakestorage.CreateBucketOpts{Name: bucket})
		}
	}
	handler := newXMLWrites(server)
	log.Printf("gcs-server listening on %s", *addr)
	log.Fatal(http.ListenAndServe(*addr, handler))
}
