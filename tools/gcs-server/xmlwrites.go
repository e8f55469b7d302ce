package main

// The XML API writes that fake-gcs-server does not serve, following
// Google's XML API reference: PUT of an object, and the multipart upload
// (initiate with POST ?uploads, PUT ?partNumber&uploadId, complete with
// POST ?uploadId, abort with DELETE ?uploadId). Parts are kept in memory
// and the completed object is stored through fakestorage, so reads,
// listings and deletes see it exactly as an object fakestorage created.
// A bucket that does not exist answers 404 NoSuchBucket, also for the
// bucket listing (fakestorage answers 500 there).

import (
	"bytes"
	"crypto/md5"
	"crypto/rand"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/fsouza/fake-gcs-server/fakestorage"
)

type xmlWrites struct {
	server *fakestorage.Server
	next   http.Handler

	mu      sync.Mutex
	uploads map[string]*upload
}

// upload is one multipart upload in progress.
type upload struct {
	bucket, object, contentType string
	parts                       map[int]part
}

type part struct {
	etag string
	data []byte
}

func newXMLWrites(server *fakestorage.Server) *xmlWrites {
	return &xmlWrites{
		server:  server,
		next:    server.HTTPHandler(),
		uploads: map[string]*upload{},
	}
}

func (x *xmlWrites) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	bucket, object, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	query := r.URL.Query()
	reserved := bucket == "" || strings.HasPrefix(r.URL.Path, "/storage/") ||
		strings.HasPrefix(r.URL.Path, "/upload/") || strings.HasPrefix(r.URL.Path, "/download/") ||
		strings.HasPrefix(r.URL.Path, "/batch/") || strings.HasPrefix(r.URL.Path, "/_internal/")
	if reserved {
		x.next.ServeHTTP(w, r)
		return
	}
	if object == "" {
		if r.Method == http.MethodGet && !x.bucketExists(bucket) {
			noSuchBucket(w)
			return
		}
		x.next.ServeHTTP(w, r)
		return
	}
	switch {
	case r.Method == http.MethodPost && query.Has("uploads"):
		x.initiate(w, r, bucket, object)
	case r.Method == http.MethodPut && query.Has("uploadId"):
		x.putPart(w, r, query.Get("uploadId"), query.Get("partNumber"))
	case r.Method == http.MethodPost && query.Has("uploadId"):
		x.complete(w, r, query.Get("uploadId"))
	case r.Method == http.MethodDelete && query.Has("uploadId"):
		x.abort(w, query.Get("uploadId"))
	case r.Method == http.MethodPut && r.Header.Get("x-goog-copy-source") == "" &&
		len(query) == 0:
		x.putObject(w, r, bucket, object)
	default:
		x.next.ServeHTTP(w, r)
	}
}

func (x *xmlWrites) bucketExists(bucket string) bool {
	_, err := x.server.Backend().GetBucket(bucket)
	return err == nil
}

// generation of the stored object, 0 when there is none.
func (x *xmlWrites) generation(bucket, object string) int64 {
	obj, err := x.server.GetObjectStreaming(bucket, object)
	if err != nil {
		return 0
	}
	defer obj.Close()
	return obj.Generation
}

// store writes an object through fakestorage and answers with its ETag
// and generation, as GCS does.
func (x *xmlWrites) store(w http.ResponseWriter, r *http.Request, bucket, object, contentType string, data []byte) {
	if match := r.Header.Get("x-goog-if-generation-match"); match != "" {
		want, err := strconv.ParseInt(match, 10, 64)
		if err != nil {
			xmlError(w, http.StatusBadRequest, "InvalidArgument", "bad x-goog-if-generation-match")
			return
		}
		if x.generation(bucket, object) != want {
			xmlError(w, http.StatusPreconditionFailed, "PreconditionFailed",
				"At least one of the pre-conditions you specified did not hold.")
			return
		}
	}
	err := x.server.CreateObjectStreaming(fakestorage.StreamingObject{
		ObjectAttrs: fakestorage.ObjectAttrs{BucketName: bucket, Name: object, ContentType: contentType},
		Content:     nopCloser{bytes.NewReader(data)},
	})
	if err != nil {
		xmlError(w, http.StatusInternalServerError, "InternalError", err.Error())
		return
	}
	stored, err := x.server.GetObjectStreaming(bucket, object)
	if err != nil {
		xmlError(w, http.StatusInternalServerError, "InternalError", err.Error())
		return
	}
	defer stored.Close()
	w.Header().Set("ETag", strconv.Quote(stored.Etag))
	w.Header().Set("x-goog-generation", strconv.FormatInt(stored.Generation, 10))
	if r.Method == http.MethodPost {
		writeXML(w, completeResult{Bucket: bucket, Key: object, ETag: strconv.Quote(stored.Etag)})
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (x *xmlWrites) putObject(w http.ResponseWriter, r *http.Request, bucket, object string) {
	if !x.bucketExists(bucket) {
		noSuchBucket(w)
		return
	}
	data, err := io.ReadAll(r.Body)
	if err != nil {
		xmlError(w, http.StatusBadRequest, "IncompleteBody", err.Error())
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	x.store(w, r, bucket, object, r.Header.Get("Content-Type"), data)
}

func (x *xmlWrites) initiate(w http.ResponseWriter, r *http.Request, bucket, object string) {
	if !x.bucketExists(bucket) {
		noSuchBucket(w)
		return
	}
	id := make([]byte, 16)
	if _, err := rand.Read(id); err != nil {
		xmlError(w, http.StatusInternalServerError, "InternalError", err.Error())
		return
	}
	uploadID := hex.EncodeToString(id)
	x.mu.Lock()
	x.uploads[uploadID] = &upload{
		bucket: bucket, object: object, contentType: r.Header.Get("Content-Type"),
		parts: map[int]part{},
	}
	x.mu.Unlock()
	writeXML(w, initiateResult{Bucket: bucket, Key: object, UploadID: uploadID})
}

func (x *xmlWrites) putPart(w http.ResponseWriter, r *http.Request, uploadID, number string) {
	n, err := strconv.Atoi(number)
	if err != nil || n < 1 || n > 10000 {
		xmlError(w, http.StatusBadRequest, "InvalidArgument", "partNumber must be 1 to 10000")
		return
	}
	data, err := io.ReadAll(r.Body)
	if err != nil {
		xmlError(w, http.StatusBadRequest, "IncompleteBody", err.Error())
		return
	}
	sum := md5.Sum(data)
	etag := strconv.Quote(hex.EncodeToString(sum[:]))
	x.mu.Lock()
	defer x.mu.Unlock()
	up, ok := x.uploads[uploadID]
	if !ok {
		noSuchUpload(w)
		return
	}
	up.parts[n] = part{etag: etag, data: data}
	w.Header().Set("ETag", etag)
	w.WriteHeader(http.StatusOK)
}

func (x *xmlWrites) complete(w http.ResponseWriter, r *http.Request, uploadID string) {
	var request completeRequest
	if err := xml.NewDecoder(r.Body).Decode(&request); err != nil {
		xmlError(w, http.StatusBadRequest, "MalformedXML", err.Error())
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	up, ok := x.uploads[uploadID]
	if !ok {
		noSuchUpload(w)
		return
	}
	if len(request.Parts) == 0 {
		xmlError(w, http.StatusBadRequest, "MalformedXML", "no parts")
		return
	}
	if !sort.SliceIsSorted(request.Parts, func(i, j int) bool {
		return request.Parts[i].Number < request.Parts[j].Number
	}) {
		xmlError(w, http.StatusBadRequest, "InvalidPartOrder", "parts must be in ascending order")
		return
	}
	var data bytes.Buffer
	for _, listed := range request.Parts {
		stored, ok := up.parts[listed.Number]
		if !ok || strings.Trim(stored.etag, `"`) != strings.Trim(listed.ETag, `"`) {
			xmlError(w, http.StatusBadRequest, "InvalidPart",
				fmt.Sprintf("part %d was not uploaded or its ETag differs", listed.Number))
			return
		}
		data.Write(stored.data)
	}
	delete(x.uploads, uploadID)
	x.store(w, r, up.bucket, up.object, up.contentType, data.Bytes())
}

func (x *xmlWrites) abort(w http.ResponseWriter, uploadID string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if _, ok := x.uploads[uploadID]; !ok {
		noSuchUpload(w)
		return
	}
	delete(x.uploads, uploadID)
	w.WriteHeader(http.StatusNoContent)
}

type initiateResult struct {
	XMLName  xml.Name `xml:"InitiateMultipartUploadResult"`
	Bucket   string   `xml:"Bucket"`
	Key      string   `xml:"Key"`
	UploadID string   `xml:"UploadId"`
}

type completeRequest struct {
	Parts []struct {
		Number int    `xml:"PartNumber"`
		ETag   string `xml:"ETag"`
	} `xml:"Part"`
}

type completeResult struct {
	XMLName xml.Name `xml:"CompleteMultipartUploadResult"`
	Bucket  string   `xml:"Bucket"`
	Key     string   `xml:"Key"`
	ETag    string   `xml:"ETag"`
}

type errorBody struct {
	XMLName xml.Name `xml:"Error"`
	Code    string   `xml:"Code"`
	Message string   `xml:"Message"`
}

func writeXML(w http.ResponseWriter, body any) {
	raw, err := xml.Marshal(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(append([]byte(xml.Header), raw...))
}

func xmlError(w http.ResponseWriter, status int, code, message string) {
	raw, _ := xml.Marshal(errorBody{Code: code, Message: message})
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(status)
	_, _ = w.Write(append([]byte(xml.Header), raw...))
}

// noSuchBucket answers as GCS does, whose message does not name the bucket.
func noSuchBucket(w http.ResponseWriter) {
	xmlError(w, http.StatusNotFound, "NoSuchBucket", "The specified bucket does not exist.")
}

func noSuchUpload(w http.ResponseWriter) {
	xmlError(w, http.StatusNotFound, "NoSuchUpload",
		"The requested upload was not found.")
}

type nopCloser struct{ *bytes.Reader }

func (nopCloser) Close() error { return nil }
